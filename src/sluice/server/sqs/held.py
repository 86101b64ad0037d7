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
from sluice.message import Holder, Message
from sluice.server.offload import Offload

__all__ = ["Acks", "Offloaded", "take"]


class Acks:
    """Acknowledgements asked for in the same turn of the event loop, committed together
    with ``Database.ack_many`` in one hop to the offload threads: a DeleteMessageBatch's
    deletes are one commit (one flush; on PostgreSQL one round trip), each message still
    settled on its own."""

    def __init__(self, db: sluice.Database, offload: Offload) -> None:
        self._db = db
        self._offload = offload
        self._pending: list[tuple[Message, asyncio.Future[None]]] = []

    async def ack(self, message: Message) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._pending.append((message, done))
        if len(self._pending) == 1:  # the others of this turn join it before it runs
            loop.call_soon(self._flush)
        await done

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        commit = asyncio.ensure_future(self._commit(batch))
        _GIVING_BACK.add(commit)
        commit.add_done_callback(_GIVING_BACK.discard)

    async def _commit(self, batch: list[tuple[Message, asyncio.Future[None]]]) -> None:
        try:
            results = await self._offload(self._db.ack_many, [m for m, _ in batch])
        except BaseException as exc:  # the database failed them all
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        for (_, done), error in zip(batch, results, strict=True):
            if done.done():  # its request went away meanwhile; the ack stands
                continue
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)


class Offloaded:
    """The ``AsyncHolder`` of a message taken with the blocking API: its transaction's
    commit (with the other acks of the same turn: ``Acks``), release and reject run in
    the offload threads."""

    __slots__ = ("_acks", "_holder", "_message", "_offload")

    def __init__(self, message: Message, holder: Holder, offload: Offload, acks: Acks) -> None:
        self._message = message
        self._holder = holder
        self._offload = offload
        self._acks = acks

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
        await self._acks.ack(self._message)

    async def release(self, message: AsyncMessage) -> None:
        await self._offload(self._holder.release, message.message)

    async def reject(self, message: AsyncMessage, reason: str) -> None:
        await self._offload(self._holder.reject, message.message, reason)


def _take(db: sluice.Database, queue: str, most: int) -> list[Message]:
    """Up to ``most`` ready messages of ``queue`` in one claim (``Database.get_many``),
    each then held in a transaction of its own, in the queue's order; of a FIFO queue's
    group one at a time, as separate receives would take them."""
    return db.get_many([queue], limit=most)


async def take(
    db: sluice.Database, offload: Offload, acks: Acks, queue: str, most: int
) -> list[AsyncMessage]:
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
    return [wrap(m, offload, acks) for m in taken]


def wrap(message: Message, offload: Offload, acks: Acks) -> AsyncMessage:
    """``message`` (taken with the blocking API) as the ``AsyncMessage`` a lease holds."""
    holder = message.holder
    if holder is None:
        raise ValueError(f"message {message.id} was browsed, not taken")
    return AsyncMessage(message, Offloaded(message, holder, offload, acks))


_GIVING_BACK: set[asyncio.Future[None]] = set()
"""Releases under way for cancelled receives, and acks' commits (kept referenced until
they end)."""


def _give_back(done: asyncio.Future[list[Message]], offload: Offload) -> None:
    if done.cancelled() or done.exception() is not None:
        return
    for m in done.result():
        release = asyncio.ensure_future(offload(m.release))
        _GIVING_BACK.add(release)
        release.add_done_callback(_GIVING_BACK.discard)
