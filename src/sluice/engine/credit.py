"""A consumer's own credit: the most messages one queue handle holds unsettled at once.

``db.queue(name, max_in_flight=n)`` gives a handle whose ``get`` returns None
(or waits, with ``wait=``) while n of the messages it took are not yet
settled. The count is the handle's, in this process; the queue's own
``max_in_flight`` is counted in the database over all its consumers, and both
apply. A message is settled when its transaction ends: ``ack``, ``release``,
``reject``, or the transaction failing at commit.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from sluice.engine.transaction import Transaction
from sluice.errors import ConfigurationError

if TYPE_CHECKING:
    from sluice.engine.context import EngineContext

__all__ = ["Credit", "CreditedTransaction", "check_max_in_flight"]


def check_max_in_flight(value: int) -> int:
    """A consumer's cap, checked as a queue's is (1 to 2**31 - 1)."""
    if type(value) is not int or not 1 <= value < 2**31:
        raise ConfigurationError(
            f"max_in_flight must be a positive integer below 2**31 or None, not {value!r}"
        )
    return value


class Credit:
    """How many of a handle's messages are unsettled, against its cap. Thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = check_max_in_flight(limit)
        self._used = 0
        self._freed = threading.Condition(threading.Lock())

    @property
    def used(self) -> int:
        """Messages taken (or being taken) through the handle and not yet settled."""
        return self._used

    def acquire(self, timeout: float) -> bool:
        """Take one unit of credit, waiting up to ``timeout`` seconds for one to be freed."""
        deadline = time.monotonic() + timeout
        with self._freed:
            while self._used >= self.limit:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._freed.wait(remaining)
            self._used += 1
            return True

    def release(self) -> None:
        """Give one unit back: a message settled, or a get took nothing."""
        with self._freed:
            self._used -= 1
            self._freed.notify()


class CreditedTransaction(Transaction):
    """The one-message transaction of a credited handle's ``get``: its end frees the credit."""

    __slots__ = ("_credit",)

    def __init__(self, context: EngineContext, credit: Credit) -> None:
        super().__init__(context, implicit=True)
        self._credit: Credit | None = credit

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self._ended()

    def abort(self) -> None:
        try:
            super().abort()
        finally:
            self._ended()

    def _ended(self) -> None:
        # A commit that failed with the transaction still open (the database went away)
        # leaves the message held: its credit too, until the transaction ends.
        if self.closed and self._credit is not None:
            credit, self._credit = self._credit, None
            credit.release()

    def give_back(self) -> None:
        """The get failed before taking anything: the credit goes back at once."""
        if self._credit is not None:
            credit, self._credit = self._credit, None
            credit.release()
