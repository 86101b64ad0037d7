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

With a ``batch`` setting above 1, and a transport that delivers several messages at once
(``deliver_many``: the http transport into another sluice), a transaction takes up to
that many consecutive messages and the transport delivers them in order, as many per
request as it can; each is settled as above in the one transaction (one commit for the
batch). The batch is what the queue gives when asked for several: each group's messages
in order (what forwarding needs), the heads of several groups (and ungrouped messages)
side by side, so across groups the order may differ from one at a time. The first that
fails holds back those behind it, as one alone would; the ones delivered before it stay
delivered. A stop while it waits gives back the undelivered.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sluice.errors import DeliveryFailed
from sluice.gateways.model import Gateway
from sluice.gateways.transports import Delivered, Outbound

if TYPE_CHECKING:
    from sluice.engine.database import Engine
    from sluice.engine.transaction import Transaction
    from sluice.message import Message

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
        many = getattr(out, "deliver_many", None)
        self._many = many if callable(many) else None
        self.batch = int(gateway.number("batch", 1, minimum=1)) if self._many else 1

    def send_one(self, *, wait: float = 0.0) -> bool:
        """Take the next message (waiting up to ``wait`` s) and deliver it; False if
        none came, or the sender was stopped before the message was settled."""
        return self.send(wait=wait, limit=1) > 0

    def send(self, *, wait: float = 0.0, limit: int | None = None) -> int:
        """Take the next messages, up to the gateway's ``batch`` (or ``limit``), waiting
        up to ``wait`` s for the first, and deliver them in order; how many were settled
        (delivered or made error messages) and committed."""
        queue = self._gateway.queue
        tx = self._db.transaction()
        try:
            taken = tx.dequeue(queue, limit=min(self.batch, limit or self.batch), wait=wait)
            pending = list(taken)
            tried = 0
            while pending:
                replies, failure = self._deliver(pending)
                for message, reply in zip(pending, replies, strict=False):
                    self._keep(tx, message, reply)
                pending = pending[len(replies) :]
                tried = 1 if replies else tried + 1  # tries of the first one left
                if failure is None:
                    tried = 0
                    continue
                head = pending[0]
                if failure.retry and tried < self._gateway.attempts:
                    if self._stop.wait(self._gateway.backoff(tried)):
                        return self._give_back(tx, len(taken), pending)
                    continue
                tx.reject(head, f"gateway {queue!r}, try {tried}: {failure}")
                pending = pending[1:]
                tried = 0
            tx.commit()
            return len(taken)
        except BaseException:
            if not tx.closed:
                tx.abort()
            raise

    def _deliver(
        self, messages: Sequence[Message]
    ) -> tuple[Sequence[Delivered | None], DeliveryFailed | None]:
        if self._many is not None and len(messages) > 1:
            done: tuple[Sequence[Delivered | None], DeliveryFailed | None]
            done = self._many(messages)
            return done
        try:
            return [self._out.deliver(messages[0])], None
        except DeliveryFailed as exc:
            return [], exc

    def _keep(self, tx: Transaction, message: Message, reply: Delivered | None) -> None:
        if reply is not None and self.reply_queue is not None:
            tx.enqueue(self.reply_queue, reply.body, content_type=reply.content_type,
                       correlation_id=message.id, properties=dict(reply.properties))  # fmt: skip

    @staticmethod
    def _give_back(tx: Transaction, taken: int, pending: list[Message]) -> int:
        """Stopping: the undelivered messages go back to their place (the last taken
        first), the delivered ones are settled."""
        if len(pending) == taken:
            tx.abort()
            return 0
        for message in reversed(pending):
            tx.release(message)
        tx.commit()
        return taken - len(pending)

    def close(self) -> None:
        self._out.close()

    def run(self, *, poll: float) -> None:
        """Send until stopped, waiting up to ``poll`` s at a time for the next message."""
        while not self._stop.is_set():
            self.send(wait=poll)
