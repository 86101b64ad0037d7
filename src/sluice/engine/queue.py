"""A handle on one queue: autocommit put and get, browse and stats."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple, Unpack

from sluice.backends.records import Selection
from sluice.catalog import QueueSpec
from sluice.engine import topics
from sluice.engine.credit import Credit, CreditedTransaction
from sluice.engine.enqueue import EnqueueOptions, check_seconds
from sluice.engine.reading import BrowseState, browse
from sluice.engine.transaction import Transaction
from sluice.errors import ConfigurationError
from sluice.message import Body, Message, Position

if TYPE_CHECKING:
    from sluice.engine.context import EngineContext

__all__ = ["Queue", "Retried"]


class Retried(NamedTuple):
    """What ``Queue.retry`` did, by the queue the messages came from."""

    moved: dict[str, int]
    """Messages sent back, by source queue."""
    left: dict[str, int]
    """Messages left failed: their source was not allowed, or exists no more."""

    @property
    def total(self) -> int:
        """Messages sent back."""
        return sum(self.moved.values())


def _anywhere(queue: str) -> bool:
    return True


class Queue:
    """Operations on one queue, each its own transaction.

    A handle made with ``max_in_flight`` (``db.queue(name, max_in_flight=n)``) is a
    consumer with its own credit: ``get`` takes nothing while n of the messages it
    took are unsettled (docs/delivery.md). Thread-safe.
    """

    def __init__(
        self, context: EngineContext, name: str, *, max_in_flight: int | None = None
    ) -> None:
        self._context = context
        self.name = name
        self._credit = None if max_in_flight is None else Credit(max_in_flight)

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    @property
    def max_in_flight(self) -> int | None:
        """This handle's own cap on unsettled messages (None: only the queue's applies)."""
        return None if self._credit is None else self._credit.limit

    @property
    def in_flight(self) -> int:
        """Messages this handle took and has not settled (0 for a handle without a cap)."""
        return 0 if self._credit is None else self._credit.used

    @property
    def spec(self) -> QueueSpec:
        """The queue's current settings."""
        return self._context.spec(self.name, fresh=True)

    @property
    def paused(self) -> bool:
        """Whether consumers are kept from the queue (read now, as every process sees it)."""
        return self.spec.paused

    def pause(self) -> None:
        """Keep every consumer, in every process, from taking the queue's messages.

        Until ``resume``: gets, dequeues, job workers and the rules engine take nothing
        from it, while producers still enqueue and ``browse`` still shows what it holds;
        messages consumers hold already stay theirs to settle. A topic is not consumed
        itself: pause its subscriptions. Pausing a paused queue changes nothing.
        """
        self._set_paused(True)

    def resume(self) -> None:
        """Let consumers take from the queue again; those waiting for it wake now."""
        self._set_paused(False)
        self._context.wakeups.notify(self.name)

    def _set_paused(self, paused: bool) -> None:
        spec = self._context.spec(self.name, fresh=True)  # QueueNotFound
        if spec.kind == "topic":
            raise ConfigurationError(
                f"topic {self.name!r} is not consumed itself: pause or resume its "
                "subscriptions instead"
            )
        self._context.backend.set_paused(self.name, paused)
        self._context.forget(self.name)

    def put(self, body: Body, **options: Unpack[EnqueueOptions]) -> str:
        """Enqueue one message and commit; returns its id once it is durable.

        Options as for ``Transaction.enqueue_many``: priority, properties, delay,
        ttl, content_type, correlation_id, reply_to.
        """
        (message_id,) = self.put_many([body], **options)
        return message_id

    def put_many(self, bodies: Iterable[Body], **options: Unpack[EnqueueOptions]) -> list[str]:
        """Enqueue several messages with the same options in one transaction; returns their ids."""
        tx = Transaction(self._context, implicit=True)
        ids = tx.enqueue_many(self.name, bodies, **options)
        tx.commit()
        return ids

    def get(
        self,
        *,
        wait: float = 0.0,
        where: str | None = None,
        order_by: Sequence[str] | None = None,
    ) -> Message | None:
        """Take the next message, or None if none arrives within ``wait`` seconds.

        ``where`` and ``order_by`` select and order by content, as for
        ``Transaction.dequeue``. Settle it with ``ack()``, ``release()`` or
        ``reject(reason)``; until then nobody else sees it, and if this process
        dies it returns to its place. A handle with its own ``max_in_flight``
        holding that many waits (up to ``wait``) for one of them to be settled,
        and returns None if none is.
        """
        if self._credit is not None:
            return self._credited_get(self._credit, wait, where, order_by)
        tx = Transaction(self._context, implicit=True)
        messages = tx.dequeue(self.name, limit=1, wait=wait, where=where, order_by=order_by)
        if not messages:
            tx.commit()
            return None
        return messages[0]

    def _credited_get(
        self, credit: Credit, wait: float, where: str | None, order_by: Sequence[str] | None
    ) -> Message | None:
        deadline = time.monotonic() + check_seconds("wait", wait, allow_zero=True)
        self._context.spec(self.name)  # QueueNotFound before waiting for credit
        if not credit.acquire(wait):
            return None
        tx = CreditedTransaction(self._context, credit)
        try:
            remaining = max(0.0, deadline - time.monotonic())
            messages = tx.dequeue(
                self.name, limit=1, wait=remaining, where=where, order_by=order_by
            )
        except BaseException:
            tx.give_back()
            raise
        if not messages:
            tx.commit()  # nothing held: its credit goes back
            return None
        return messages[0]

    def browse(
        self,
        limit: int = 100,
        *,
        state: BrowseState = "ready",
        where: str | None = None,
        order_by: Sequence[str] | None = None,
        after: Position | str | tuple[int, int] | None = None,
    ) -> list[Message]:
        """Messages in delivery order without taking them (``state`` picks which).

        ``where`` and ``order_by`` select and order by content; ``after``: a message's
        ``position``, to page on from it (the next page starts after the last message).
        ``state="done"``: what a queue with ``retention`` kept of the messages settled,
        in the order they were settled (docs/retention.md).
        """
        self._context.spec(self.name)
        return browse(
            self._context,
            self.name,
            limit=limit,
            state=state,
            tx=None,
            where=where,
            order_by=order_by,
            after=after,
        )

    def purge(
        self, state: Literal["ready", "expired", "failed", "done"], *, older_than: float = 0.0
    ) -> int:
        """Delete messages in one database transaction; returns how many went.

        ``ready``: every message not yet delivered, ready now or delayed (docs/queues.md#purging);
        never one a transaction holds (it is settled by its holder) nor one not yet
        committed. A subscription first takes its topic's backlog; a topic refuses.
        ``expired`` or ``failed``: kept ones enqueued over ``older_than`` seconds ago;
        ``done``: kept ones settled over ``older_than`` seconds ago.
        """
        if state not in ("ready", "expired", "failed", "done"):
            raise ConfigurationError(
                f"only ready, expired, failed or done messages are purged, not {state!r}"
            )
        if (
            isinstance(older_than, bool)
            or not isinstance(older_than, int | float)
            or older_than < 0
        ):
            raise ConfigurationError(f"older_than must be seconds >= 0, not {older_than!r}")
        spec = self._context.spec(self.name)
        if state == "ready":
            return self._purge_ready(spec, older_than)
        return self._context.backend.purge(self.name, state, self._context.clock.now() - older_than)

    def _purge_ready(self, spec: QueueSpec, older_than: float) -> int:
        if older_than:
            # A lane's older messages gone and its newer ones kept would wait behind none.
            raise ConfigurationError(
                "older_than is for kept messages: purge('ready') deletes every ready one"
            )
        if spec.kind == "topic":
            raise ConfigurationError(
                f"{spec.name!r} is a topic: its messages are its subscriptions'; purge "
                "each subscription (sluice stats shows them)"
            )
        # What the topic has for a subscription is its backlog too, not yet taken in.
        topics.before_take(self._context, spec, everything=True)
        gone = self._context.backend.purge(self.name, "ready", self._context.clock.now())
        if spec.kind == "subscription":
            self._context.ready_hints[spec.name] = 0
        return gone

    def retry(
        self,
        *,
        where: str | None = None,
        at: Position | str | tuple[int, int] | None = None,
        allowed: Callable[[str], bool] | None = None,
    ) -> Retried:
        """Send this queue's failed messages back to the queues they came from, all in
        one database transaction: those ``where`` selects, or the one ``at`` a position,
        or else every one.

        Failed messages are those rejected or out of attempts that nobody holds: the
        ready messages of an error queue that came to it so, or those a queue without
        an error queue keeps as failed. Each goes back ready, as fresh (no attempts,
        no error), to its place in the source queue's delivery order, in no lane.
        ``allowed(source)`` False leaves a source's messages where they are, as does a
        source queue that no longer exists.
        """
        select, ref = self._failed(where, at)
        moved, left = self._context.backend.retry_failed(
            self.name, select=select, ref=ref, allowed=allowed or _anywhere
        )
        for origin, count in moved.items():
            self._context.wakeups.notify(origin, count)
        return Retried(moved, left)

    def discard(
        self, *, where: str | None = None, at: Position | str | tuple[int, int] | None = None
    ) -> int:
        """Delete this queue's failed messages (as ``retry`` finds them): those ``where``
        selects, or the one ``at`` a position, or else every one. Returns how many went."""
        select, ref = self._failed(where, at)
        return self._context.backend.discard_failed(self.name, select=select, ref=ref)

    def _failed(
        self, where: str | None, at: Position | str | tuple[int, int] | None
    ) -> tuple[Selection | None, int | None]:
        if where is not None and at is not None:
            raise ConfigurationError("give where= or at=, not both: at= names one message")
        content = self._context.content(self.name)  # QueueNotFound first
        ref = None if at is None else Position.parse(at).seq
        return content.selection(where, None), ref

    def stats(self) -> dict[str, int]:
        """Counts: ready, delayed, pending (uncommitted), claimed, expired, failed, done."""
        spec = self._context.spec(self.name)
        counts = self._context.backend.stats(self.name)
        if spec.kind == "subscription":  # its topic's messages it has yet to take count too
            backlog = self._context.backend.backlog(self.name, topics.selector(self._context, spec))
            # As delayed when not due, as they will be once taken: counting them ready made a
            # message due in an hour "ready" until a consumer's pull made it delayed
            # (docs/topics.md: a subscription's messages are counted as a queue's).
            counts["ready"] += backlog.unpulled - backlog.unpulled_delayed
            counts["delayed"] += backlog.unpulled_delayed
        return counts

    def __len__(self) -> int:
        """Messages ready now."""
        return self.stats()["ready"]
