"""Messages a receive takes with sluice's blocking API, in the app's offload threads
(server/offload.py), and settled there too, each by its own one-message transaction as
``Queue.get`` takes it, wrapped as the ``AsyncMessage`` a lease holds.

Why not ``sluice.aio``: it runs an SQLite database's statements in one thread of its own,
one after another, so the ten deletes of a DeleteMessageBatch waited for ten fsyncs in a
row, and ten claims cost ten hops to that thread and back. Taken here, a receive's
claims are one hop, and a batch's deletes, committed at once from several threads, share
their flush to disk (group commit). A receive that waits for its first message still
waits on the event loop, through ``sluice.aio``, holding no thread.
"""

from __future__ import annotations

import asyncio

import sluice
from sluice.aio import AsyncMessage
from sluice.errors import SluiceError
from sluice.message import Holder, Message
from sluice.server.offload import Offload

__all__ = ["Offloaded", "take"]


class Offloaded:
    """The ``AsyncHolder`` of a message taken with the blocking API: its transaction's
    commit, release and reject run in the offload threads."""

    __slots__ = ("_holder", "_offload")

    def __init__(self, holder: Holder, offload: Offload) -> None:
        self._holder = holder
        self._offload = offload

    @property
    def id(self) -> str:
        return self._holder.id

    @property
    def implicit(self) -> bool:
        return self._holder.implicit

    @property
    def closed(self) -> bool:
        return self._holder.closed

    async def commit(self) -> None:
        await self._offload(self._holder.commit)

    async def release(self, message: AsyncMessage) -> None:
        await self._offload(self._holder.release, message.message)

    async def reject(self, message: AsyncMessage, reason: str) -> None:
        await self._offload(self._holder.reject, message.message, reason)


def _take(db: sluice.Database, queue: str, most: int) -> list[Message]:
    """Up to ``most`` ready messages of ``queue``, each in a transaction of its own, in
    the queue's order (a FIFO queue's groups as ``Queue.get`` keeps them)."""
    q = db.queue(queue)
    taken: list[Message] = []
    while len(taken) < most:
        try:
            m = q.get()
        except SluiceError:
            if not taken:
                raise
            break  # what was taken is answered (and leased); the next receive meets it
        if m is None:
            break
        taken.append(m)
    return taken


async def take(db: sluice.Database, offload: Offload, queue: str, most: int) -> list[AsyncMessage]:
    """``_take`` in one hop to the offload threads (claims spread over several threads
    measured a little faster on PostgreSQL here, slower on SQLite). A request cancelled
    meanwhile gives back what the claims took, once they end (the call runs to its end
    in its thread)."""
    work = asyncio.ensure_future(offload(_take, db, queue, most))
    try:
        taken = await asyncio.shield(work)
    except asyncio.CancelledError:
        work.add_done_callback(lambda done: _give_back(done, offload))
        raise
    return [wrap(m, offload) for m in taken]


def wrap(message: Message, offload: Offload) -> AsyncMessage:
    """``message`` (taken with the blocking API) as the ``AsyncMessage`` a lease holds."""
    holder = message.holder
    if holder is None:
        raise ValueError(f"message {message.id} was browsed, not taken")
    return AsyncMessage(message, Offloaded(holder, offload))


_GIVING_BACK: set[asyncio.Future[None]] = set()
"""Releases under way for cancelled receives (kept referenced until they end)."""


def _give_back(done: asyncio.Future[list[Message]], offload: Offload) -> None:
    if done.cancelled() or done.exception() is not None:
        return
    for m in done.result():
        release = asyncio.ensure_future(offload(m.release))
        _GIVING_BACK.add(release)
        release.add_done_callback(_GIVING_BACK.discard)
