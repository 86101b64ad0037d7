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

A gateway with a ``profile`` (``throttle``) sends within that time-of-week profile: a
send is counted before its message is taken, and while the cap in force is used up
the sender takes nothing (``held_until`` says until when, on the database's clock).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from sluice.errors import DeliveryFailed
from sluice.gateways.model import Gateway
from sluice.gateways.throttle import Throttle
from sluice.gateways.transports import Outbound
from sluice.jobs.limits import Starts

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
        profile = gateway.text("profile")
        self._throttle = None if profile is None else Throttle(db, gateway, profile)
        self.held_until: float | None = None
        """While the profile's cap is used up: when the full window ends (else None)."""

    def send_one(self, *, wait: float = 0.0) -> bool:
        """Take the next message (waiting up to ``wait`` s) and deliver it; False if
        none came, or the sender was stopped before the message was settled."""
        queue = self._gateway.queue
        starts: Starts | None = None
        if self._throttle is not None:
            starts, until = self._throttle.take()
            if starts is None:
                self.held_until = until
                return False
        self.held_until = None
        sent = False  # whether a try may have reached the other side
        tx = self._db.transaction()
        try:
            taken = tx.dequeue(queue, limit=1, wait=wait)
            if not taken:
                tx.commit()
                self._give_back(starts)
                return False
            (message,) = taken
            tried = 0
            while True:
                tried += 1
                try:
                    reply = self._out.deliver(message)
                except DeliveryFailed as exc:
                    sent = sent or exc.kind == "timed out"  # it may have arrived
                    if exc.retry and tried < self._gateway.attempts:
                        if self._stop.wait(self._gateway.backoff(tried)):
                            tx.abort()  # stopping: the message goes back to its place
                            if not sent:
                                self._give_back(starts)
                            return False
                        continue
                    tx.reject(message, f"gateway {queue!r}, try {tried}: {exc}")
                    tx.commit()
                    if not sent:
                        self._give_back(starts)
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

    def _give_back(self, starts: Starts | None) -> None:
        if starts is not None and self._throttle is not None:
            self._throttle.give_back(starts)

    def close(self) -> None:
        self._out.close()

    def run(self, *, poll: float) -> None:
        """Send until stopped, waiting up to ``poll`` s at a time for the next message
        (and, while the profile holds sends back, ``poll`` s between looks at the clock)."""
        while not self._stop.is_set():
            if not self.send_one(wait=poll) and self.held_until is not None:
                ahead = self.held_until - self._db.clock.now()
                self._stop.wait(min(poll, max(ahead, 0.01)))
