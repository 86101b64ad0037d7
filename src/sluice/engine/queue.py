"""A handle on one queue: autocommit put and get, browse and stats."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, Unpack

from sluice.catalog import QueueSpec
from sluice.engine import topics
from sluice.engine.reading import BrowseState, browse
from sluice.engine.transaction import EnqueueOptions, Transaction
from sluice.errors import ConfigurationError
from sluice.message import Body, Message, Position

if TYPE_CHECKING:
    from sluice.engine.context import EngineContext

__all__ = ["Queue"]


class Queue:
    """Operations on one queue, each its own transaction."""

    def __init__(self, context: EngineContext, name: str) -> None:
        self._context = context
        self.name = name

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    @property
    def spec(self) -> QueueSpec:
        """The queue's current settings."""
        return self._context.spec(self.name, fresh=True)

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
        dies it returns to its place.
        """
        tx = Transaction(self._context, implicit=True)
        messages = tx.dequeue(self.name, limit=1, wait=wait, where=where, order_by=order_by)
        if not messages:
            tx.commit()
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

    def purge(self, state: Literal["expired", "failed", "done"], *, older_than: float = 0.0) -> int:
        """Delete kept ``expired`` or ``failed`` messages enqueued over ``older_than`` seconds
        ago, or ``done`` ones settled over ``older_than`` seconds ago.

        Returns how many went. Ready, delayed and claimed messages are never purged.
        """
        if state not in ("expired", "failed", "done"):
            raise ConfigurationError(
                f"only expired, failed or done messages are purged, not {state!r}"
            )
        if (
            isinstance(older_than, bool)
            or not isinstance(older_than, int | float)
            or older_than < 0
        ):
            raise ConfigurationError(f"older_than must be seconds >= 0, not {older_than!r}")
        self._context.spec(self.name)
        return self._context.backend.purge(self.name, state, self._context.clock.now() - older_than)

    def stats(self) -> dict[str, int]:
        """Counts: ready, delayed, pending (uncommitted), claimed, expired, failed, done."""
        spec = self._context.spec(self.name)
        counts = self._context.backend.stats(self.name)
        if spec.kind == "subscription":  # its topic's messages it has yet to take are ready
            counts["ready"] += self._context.backend.backlog(
                self.name, topics.selector(self._context, spec)
            ).unpulled
        return counts

    def __len__(self) -> int:
        """Messages ready now."""
        return self.stats()["ready"]
