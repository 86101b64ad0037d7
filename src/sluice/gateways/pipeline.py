"""An outgoing gateway's sends as a pipeline (how ``db.gateways.start`` runs a gateway
without a profile; a profiled one's ``Sender.run`` sends one by one): while
the transport delivers one transaction's messages (on a thread of its own, the
courier), the sender commits the transaction delivered before and takes the next
messages in a new one. A round of a forwarding gateway then costs the longer of the
delivery (the receiver's work) and the sender's own database work, not their sum.

What stays as it is:

- **Order.** Each delivery starts after the one before has answered, so the receiver
  gets each message before the next. The next messages are taken while the current ones
  are still held: the queue gives nobody messages another transaction holds, and a
  group's next message only to the transaction that holds the group's last one
  (docs/delivery.md), so a grouped queue's next transaction takes other groups' messages
  (or none, and waits its turn); across groups the order is the queue's.
- **Failures.** A delivery that fails is tried again and settled as ``Sender.settle``
  says, the next transaction's messages held meanwhile (not given back, so their
  attempts are not counted), then delivered after it.
- **Commits.** A transaction is committed, durably, before the one after it: its
  messages were delivered (acknowledged) or made error messages first. A commit that
  fails (the database went away) gives its messages back to their places; they are then
  delivered again after the next ones, as any message taken and not acknowledged is (an
  http receiver that honours ``Idempotency-Key``, as sluice serve does, stores each
  once, in its first place). An abort the database refuses (a full disk) is finished
  before the next take (docs/queues.md), so the messages behind are never taken first.
- **Leases.** Nothing is delivered once the session may have lost its lease (its
  heartbeats failing, on a full disk say, for longer than the lease): another process
  may have given its messages back already, and delivering the next ones it took would
  put them ahead of those (``Transaction.check_lease``).
- **Stopping.** A delivered transaction is committed; the next one, taken but not
  delivered, is given back (its messages' attempts counted, as a release counts them).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice.engine.database import Engine
    from sluice.engine.transaction import Transaction
    from sluice.gateways.sender import Sender, Tried
    from sluice.message import Message

__all__ = ["Pipeline"]

_Taken = tuple["Transaction", "Sequence[Message]"]
"""A transaction and the messages it took, not delivered yet."""


class Pipeline:
    """``sender``'s sends until ``stop``, one transaction delivered while the one before
    commits and the one after is taken."""

    def __init__(self, db: Engine, sender: Sender, stop: threading.Event) -> None:
        if sender.profiled:
            raise ValueError("a profiled gateway counts each send before it takes a message")
        self._db = db
        self._sender = sender
        self._stop = stop
        self._delivered: Transaction | None = None  # delivered, to commit
        self._next: _Taken | None = None  # taken, to deliver

    def run(self, *, poll: float) -> None:
        """Send until stopped, waiting up to ``poll`` s at a time for messages."""
        courier = ThreadPoolExecutor(1, thread_name_prefix=f"sluice-courier-{self._sender.queue}")
        try:
            while not self._stop.is_set():
                taken = self._next or self._take(wait=poll)
                self._next = None
                if taken is not None:
                    self._round(courier, *taken)
        finally:
            courier.shutdown()
            self._wind_down()

    def _take(self, *, wait: float) -> _Taken | None:
        """The next messages in a new transaction; while one delivered waits for its
        commit, it is committed first unless messages are there at once."""
        tx = self._db.transaction()
        try:
            size = self._sender.batch
            taken = tx.dequeue(self._sender.queue, limit=size, wait=0.0)
            if not taken and wait > 0:
                self._commit_delivered()
                taken = tx.dequeue(self._sender.queue, limit=size, wait=wait)
            if not taken:
                tx.abort()
                return None
            return tx, taken
        except BaseException:
            if not tx.closed:
                tx.abort()
            raise

    def _round(
        self, courier: ThreadPoolExecutor, tx: Transaction, taken: Sequence[Message]
    ) -> None:
        """Deliver ``taken`` (on the courier) while the delivered transaction commits
        and the next messages are taken; then settle ``taken`` as the sender does."""
        try:
            # Taken a round ago: not delivered if the session may have lost them since.
            tx.check_lease()
            delivery: Future[Tried] = courier.submit(self._sender.deliver, taken)
            try:
                self._commit_delivered()
                self._next = self._take(wait=0.0)
            finally:
                first = delivery.result()
            done = self._sender.settle(tx, taken, first)
            if done.given_back is not None:  # stopped while waiting to try again
                return
            if done.clean:
                self._delivered = tx  # committed beside the next delivery
            else:
                tx.commit()
        except BaseException:
            if not tx.closed:
                tx.abort()
            raise

    def _commit_delivered(self) -> None:
        delivered, self._delivered = self._delivered, None
        if delivered is not None:
            # A commit that fails gives its messages back to their places (a refused
            # abort is finished before the next take): left active, they stayed held by
            # this live session while the thread, run again, took the ones behind them.
            delivered.commit_or_abort()

    def _wind_down(self) -> None:
        """Stopping (or failing): the delivered are committed, the taken given back."""
        taken, self._next = self._next, None
        try:
            if self._delivered is not None and not self._delivered.closed:
                self._commit_delivered()
        finally:
            if taken is not None and not taken[0].closed:
                taken[0].abort()
