"""Acknowledgements committed off the consumer's thread, together.

Celery's event loop acknowledges each task as its pool process reports it done.
Committing there would stall the loop for a disk flush per task; here the loop hands
the message over and goes on, and one thread commits whatever acknowledgements have
piled up meanwhile with ``Database.ack_many``: one commit, one flush, each message
still settled on its own. The next batch is what piled up during that flush and, while
commits have company, up to 2 ms more: so the batches grow with the load (a no-op
Celery worker's from about 3 to 9-12 acks a commit) and a lone ack waits for nobody.
"""

from __future__ import annotations

import logging
import threading
from collections import deque

import sluice

__all__ = ["Acker"]

log = logging.getLogger("sluice.contrib.kombu")

_LINGER = 0.002  # seconds an acknowledgement waits, under load, for others to share its commit
_GROUP = 32  # acknowledgements that commit at once without waiting longer


class Acker:
    """One thread that commits the acknowledgements handed to ``ack``, in batches."""

    def __init__(self, db: sluice.Database) -> None:
        self._db = db
        self._waiting: deque[sluice.Message] = deque()
        self._news = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="sluice-kombu-acks", daemon=True)
        self._thread.start()

    def ack(self, message: sluice.Message) -> None:
        """Acknowledge ``message`` soon, with whatever else is waiting."""
        with self._news:
            if self._closing:
                raise sluice.ConfigurationError("the transport's connection is closed")
            self._waiting.append(message)
            self._news.notify()

    def close(self) -> None:
        """Commit every acknowledgement handed over so far, then end the thread."""
        with self._news:
            self._closing = True
            self._news.notify()
        self._thread.join()

    def _run(self) -> None:
        busy = False  # the last commit had company
        while True:
            with self._news:
                while not self._waiting and not self._closing:
                    self._news.wait()
                if not self._waiting:
                    return  # closing, and nothing left
                if busy:
                    # Group commit: under load, a moment longer for company, so that a
                    # busy worker's acks share a commit many at a time, not the few that
                    # pile up during one flush. Nobody waits on an ack's commit; a crash
                    # before it delivers the message again, as for any unsettled one. A
                    # lone ack (a quiet worker) commits at once.
                    self._news.wait_for(self._enough, _LINGER)
                batch = list(self._waiting)
                self._waiting.clear()
            busy = len(batch) > 1
            self._commit(batch)

    def _enough(self) -> bool:
        return len(self._waiting) >= _GROUP or self._closing

    def _commit(self, batch: list[sluice.Message]) -> None:
        try:
            results = self._db.ack_many(batch)
        except sluice.SluiceError:
            # The database refused the commit (it went away, say): nothing of it
            # committed. Still held, the messages go back when this consumer's
            # session ends, and are delivered again.
            log.exception("%d acknowledgements could not be committed", len(batch))
            return
        for message, error in zip(batch, results, strict=True):
            if isinstance(error, sluice.LeaseLost):
                # This process stalled past its lease: the message went back to its
                # queue and is (or will be) delivered again; the ack cannot count.
                log.warning(
                    "message %s of %r was given back while this consumer held it (its "
                    "session lost its lease); it will be delivered again",
                    message.id,
                    message.queue,
                )
            elif error is not None:
                log.error(
                    "message %s of %r could not be acknowledged: %s",
                    message.id,
                    message.queue,
                    error,
                )
