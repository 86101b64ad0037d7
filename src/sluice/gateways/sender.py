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

A gateway with a ``profile`` (``throttle``) sends within that time-of-week profile, one
message at a time (its ``batch`` is not used): a send is counted before its message is
taken, and while the cap in force is used up the sender takes nothing (``held_until``
says until when, on the database's clock).

``sluice run`` and ``db.gateways.start`` run a gateway without a profile as a pipeline
(pipeline.py): while the transport delivers one transaction's messages, the sender
commits the one before and takes the next.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.errors import DeliveryFailed
from sluice.gateways.model import Gateway
from sluice.gateways.stats import DeliveryStats
from sluice.gateways.throttle import Throttle
from sluice.gateways.transports import Delivered, Outbound
from sluice.jobs.limits import Starts

if TYPE_CHECKING:
    from sluice.engine.database import Engine
    from sluice.engine.transaction import Transaction
    from sluice.message import Message

__all__ = ["Round", "Sender", "Tried"]


Tried = tuple[Sequence[Delivered | None], DeliveryFailed | None]
"""One try at delivering messages: the delivered ones' replies, and why the next one was
not delivered (None if all were)."""


@dataclass(frozen=True, slots=True)
class Round:
    """How a transaction's delivery went: whether a try may have reached the other side,
    whether all were delivered at the first try, and, if the sender was stopped while
    it waited to try again, how many were settled (the rest given back)."""

    sent: bool
    clean: bool
    given_back: int | None


class Sender:
    """Delivers the messages of ``gateway``'s queue through ``out`` until ``stop``."""

    def __init__(
        self, db: Engine, gateway: Gateway, out: Outbound, stop: threading.Event,
        *, stats: DeliveryStats | None = None,
    ) -> None:  # fmt: skip
        """``stats``: where its deliveries and failures are counted (``db.gateways.stats``)."""
        self.stats = stats or DeliveryStats()
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
        many = getattr(out, "deliver_many", None)
        self._many = many if callable(many) and self._throttle is None else None
        self.batch = int(gateway.number("batch", 1, minimum=1)) if self._many else 1

    def send_one(self, *, wait: float = 0.0) -> bool:
        """Take the next message (waiting up to ``wait`` s) and deliver it; False if
        none came, the profile holds sends back, or the sender was stopped before the
        message was settled."""
        return self.send(wait=wait, limit=1) > 0

    def send(self, *, wait: float = 0.0, limit: int | None = None) -> int:
        """Take the next messages, up to the gateway's ``batch`` (or ``limit``), waiting
        up to ``wait`` s for the first, and deliver them in order; how many were settled
        (delivered or made error messages) and committed."""
        starts: Starts | None = None
        if self._throttle is not None:
            starts, until = self._throttle.take()
            if starts is None:
                self.held_until = until
                return 0
        self.held_until = None
        tx = self._db.transaction()
        try:
            taken = tx.dequeue(self.queue, limit=min(self.batch, limit or self.batch), wait=wait)
            done = self.settle(tx, taken)
            if done.given_back is None:
                tx.commit()
            if not done.sent:  # nothing taken, or only error messages that reached nobody
                self._return_starts(starts)
            return len(taken) if done.given_back is None else done.given_back
        except BaseException:
            if not tx.closed:
                tx.abort()
            raise

    def settle(
        self, tx: Transaction, taken: Sequence[Message], first: Tried | None = None
    ) -> Round:
        """Deliver ``taken`` (held by ``tx``) in order, trying again or rejecting as the
        gateway says; ``first``: the outcome of the first try, if it was made already.
        ``tx`` is left to commit, unless the sender was stopped while it waited to try
        again: then the undelivered went back and ``tx`` is ended."""
        pending = list(taken)
        tried = 0
        sent = False  # whether a try may have reached the other side (for the profile)
        clean = True  # all delivered at the first try
        while pending:
            if first is None:  # not while the lease may have lapsed: see check_lease
                tx.check_lease()
            replies, failure = self.deliver(pending) if first is None else first
            first = None
            timed_out = failure is not None and failure.kind == "timed out"
            sent = sent or bool(replies) or timed_out
            for message, reply in zip(pending, replies, strict=False):
                self._keep(tx, message, reply)
            self.stats.took(len(replies))
            pending = pending[len(replies) :]
            tried = 1 if replies else tried + 1  # tries of the first one left
            if failure is None:
                tried = 0
                continue
            clean = False
            attempts = self._gateway.attempts
            if failure.retry and tried < attempts:
                backoff = self._gateway.backoff(tried)
                self.stats.try_failed(self.queue, pending[0], failure, tried, attempts, backoff)
                if self._stop.wait(backoff):
                    return Round(sent, False, self._give_back(tx, len(taken), pending))
                continue
            self.stats.gave_up(self.queue, pending[0], failure, tried, attempts)
            tx.reject(pending[0], f"gateway {self.queue!r}, try {tried}: {failure}")
            pending = pending[1:]
            tried = 0
        return Round(sent, clean, None)

    def deliver(self, messages: Sequence[Message]) -> Tried:
        """One try at delivering ``messages`` in order (as many as the transport takes
        at once): the replies of the delivered ones, and why the next one was not."""
        if self._many is not None and len(messages) > 1:
            done: Tried = self._many(messages)
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

    def _return_starts(self, starts: Starts | None) -> None:
        """A counted send that reached nobody goes back to the profile's window."""
        if starts is not None and self._throttle is not None:
            self._throttle.give_back(starts)

    def close(self) -> None:
        self._out.close()

    @property
    def profiled(self) -> bool:
        """Whether a time-of-week profile paces this gateway's sends."""
        return self._throttle is not None

    def run(self, *, poll: float) -> None:
        """Send until stopped, one transaction after the other, waiting up to ``poll`` s
        at a time for the next message (and, while the profile holds sends back,
        ``poll`` s between looks at the clock). Without a profile, ``Pipeline`` runs a
        sender faster (pipeline.py)."""
        while not self._stop.is_set():
            if not self.send(wait=poll) and self.held_until is not None:
                ahead = self.held_until - self._db.clock.now()
                self._stop.wait(min(poll, max(ahead, 0.01)))
