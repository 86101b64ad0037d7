"""A handle on one queue for asyncio: put, get, browse, stats, and ``async for``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Literal, Unpack

from sluice.aio.context import AsyncContext
from sluice.aio.message import AsyncMessage
from sluice.aio.transaction import AsyncTransaction
from sluice.catalog import QueueSpec
from sluice.engine.enqueue import EnqueueOptions
from sluice.engine.queue import Queue
from sluice.engine.reading import BrowseState
from sluice.message import Body, Position

__all__ = ["AsyncQueue"]

_FOREVER = 3600.0  # async for waits this long per look; then it looks again


class AsyncQueue:
    """Operations on one queue, each its own transaction; see ``sluice.Queue``.

    ``async for message in queue`` takes one message at a time, each by its own
    transaction as ``get`` does, waiting as long as it takes for the next; settle
    each (``await message.ack()``) before or after asking for the next.
    """

    def __init__(self, context: AsyncContext, name: str) -> None:
        self._context = context
        self._queue = Queue(context.engine, name)
        self.name = name

    def __repr__(self) -> str:
        return f"<AsyncQueue {self.name}>"

    async def spec(self) -> QueueSpec:
        """The queue's current settings (``Queue.spec``)."""
        return await self._context.runner(lambda: self._queue.spec)

    async def put(self, body: Body, **options: Unpack[EnqueueOptions]) -> str:
        """Enqueue one message and commit; returns its id once it is durable."""
        (message_id,) = await self.put_many([body], **options)
        return message_id

    async def put_many(
        self, bodies: Iterable[Body], **options: Unpack[EnqueueOptions]
    ) -> list[str]:
        """Enqueue several messages with the same options in one transaction; their ids."""
        tx = AsyncTransaction(self._context, implicit=True)
        ids = await tx.enqueue_many(self.name, bodies, **options)
        await tx.commit()
        return ids

    async def get(
        self,
        *,
        wait: float = 0.0,
        where: str | None = None,
        order_by: Sequence[str] | None = None,
    ) -> AsyncMessage | None:
        """Take the next message, or None if none arrives within ``wait`` seconds.

        As ``Queue.get``. Cancelled while it waits or takes, it holds nothing: a
        message its claim took meanwhile goes back.
        """
        tx = AsyncTransaction(self._context, implicit=True)
        try:
            messages = await tx.dequeue(self.name, limit=1, wait=wait, where=where,
                                        order_by=order_by)  # fmt: skip
        except asyncio.CancelledError:
            await asyncio.shield(tx.abort())
            raise
        if not messages:
            await tx.commit()
            return None
        return messages[0]

    def __aiter__(self) -> AsyncIterator[AsyncMessage]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[AsyncMessage]:
        while True:
            message = await self.get(wait=_FOREVER)
            if message is not None:
                yield message

    async def browse(
        self,
        limit: int = 100,
        *,
        state: BrowseState = "ready",
        where: str | None = None,
        order_by: Sequence[str] | None = None,
        after: Position | str | tuple[int, int] | None = None,
    ) -> list[AsyncMessage]:
        """Messages in delivery order without taking them; see ``Queue.browse``."""
        found = await self._context.runner(
            self._queue.browse, limit, state=state, where=where, order_by=order_by, after=after
        )
        return [AsyncMessage(m, None) for m in found]

    async def purge(
        self, state: Literal["ready", "expired", "failed", "done"], *, older_than: float = 0.0
    ) -> int:
        """Delete ready (and delayed) messages, or kept expired, failed or done ones;
        see ``Queue.purge``."""
        return await self._context.runner(self._queue.purge, state, older_than=older_than)

    async def stats(self) -> dict[str, int]:
        """Counts: ready, delayed, pending (uncommitted), claimed, expired, failed, done."""
        return await self._context.runner(self._queue.stats)

    async def length(self) -> int:
        """Messages ready now (``len(queue)`` of the blocking API)."""
        return (await self.stats())["ready"]
