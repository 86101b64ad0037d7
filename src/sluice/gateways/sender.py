"""An outgoing gateway queue's sender: each message in its queue's order, delivered by
the transport, tried again after a backoff while the failure may pass, and settled in
the transaction that took it: acknowledged (with the reply, if the transport brought
one back and the gateway has a ``reply_queue``), or rejected into the queue's error
queue with the kind of failure (Demaq's error messages).

One message is held at a time, so a message that keeps failing holds back the ones
behind it until it becomes an error message: a gateway keeps its queue's order, which
node-to-node forwarding needs per group. A sender stopped while it waits to try again
gives the message back to its place; a process killed meanwhile does the same through
its session's recovery.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from sluice.errors import DeliveryFailed
from sluice.gateways.model import Gateway
from sluice.gateways.transports import Outbound

if TYPE_CHECKING:
    from sluice.engine.database import Engine

__all__ = ["Sender"]


class Sender:
    """Delivers the messages of ``gateway``'s queue through ``out`` until ``stop``."""

    def __init__(self, db: Engine, gateway: Gateway, out: Outbound, stop: threading.Event) -> None:
        self._db = db
        self._gateway = gateway
        self._out = out
        self._stop = stop
        self.queue = gateway.queue
        self.reply_queue = gateway.text("reply_queue")

    def send_one(self, *, wait: float = 0.0) -> bool:
        """Take the next message (waiting up to ``wait`` s) and deliver it; False if
        none came, or the sender was stopped before the message was settled."""
        queue = self._gateway.queue
        tx = self._db.transaction()
        try:
            taken = tx.dequeue(queue, limit=1, wait=wait)
            if not taken:
                tx.commit()
                return False
            (message,) = taken
            tried = 0
            while True:
                tried += 1
                try:
                    reply = self._out.deliver(message)
                except DeliveryFailed as exc:
                    if exc.retry and tried < self._gateway.attempts:
                        if self._stop.wait(self._gateway.backoff(tried)):
                            tx.abort()  # stopping: the message goes back to its place
                            return False
                        continue
                    tx.reject(message, f"gateway {queue!r}, try {tried}: {exc}")
                    tx.commit()
                    return True
                if reply is not None and self.reply_queue is not None:
                    tx.enqueue(self.reply_queue, reply.body, content_type=reply.content_type,
                               correlation_id=message.id,
                               properties=dict(reply.properties))  # fmt: skip
                tx.commit()
                return True
        except BaseException:
            if not tx.closed:
                tx.abort()
            raise

    def close(self) -> None:
        self._out.close()

    def run(self, *, poll: float) -> None:
        """Send until stopped, waiting up to ``poll`` s at a time for the next message."""
        while not self._stop.is_set():
            self.send_one(wait=poll)
