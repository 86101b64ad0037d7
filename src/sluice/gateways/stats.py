"""What a process's outgoing gateways did: counted for progress and summaries, and told
in the log: a failed try at WARNING (which try of how many, the failure), a message's
last one at ERROR with its traceback, as it becomes an error message."""

from __future__ import annotations

import logging
import threading

from sluice.errors import DeliveryFailed
from sluice.message import Message

__all__ = ["DeliveryStats"]

log = logging.getLogger("sluice.gateways")


class DeliveryStats:
    """The counts of every sender of one ``db.gateways``: read them from a timer."""

    def __init__(self) -> None:
        self.delivered = 0
        """Messages the other side took."""
        self.failed = 0
        """Messages that became error messages: no tries left, or a failure that would
        not pass (rejected into their queue's error queue)."""
        self.retries = 0
        """Tries that failed and were made again after a backoff."""
        self._lock = threading.Lock()

    def took(self, count: int) -> None:
        if count:
            with self._lock:
                self.delivered += count

    def try_failed(  # noqa: PLR0917  (what the line says)
        self, queue: str, message: Message, failure: DeliveryFailed, tried: int, attempts: int,
        backoff: float,
    ) -> None:  # fmt: skip
        with self._lock:
            self.retries += 1
        log.warning("gateway %r: message %s, try %d of %d failed: %s; tried again in %g s",
                    queue, message.id, tried, attempts, failure, backoff)  # fmt: skip

    def gave_up(
        self, queue: str, message: Message, failure: DeliveryFailed, tried: int, attempts: int
    ) -> None:
        with self._lock:
            self.failed += 1
        why = "no tries left" if failure.retry else "it would fail again"
        log.error("gateway %r: message %s, try %d of %d failed: %s; %s: it becomes an error "
                  "message", queue, message.id, tried, attempts, failure, why,
                  exc_info=failure)  # fmt: skip
