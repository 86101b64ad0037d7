"""Group commit in sluice.aio on PostgreSQL: acknowledgements that coroutines make while
another is being written share a transaction, and each still succeeds or fails on its own
(as threads' do in the blocking API: test_group_commit.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import psycopg
import pytest

import sluice
import sluice.aio
from sluice.aio.group_commit import AsyncGroupCommitter
from sluice.aio.postgres import PostgresStore
from sluice.backends.records import CommitPlan
from tests.conftest import schema_of

from .grouping import Queued


def _group(db: sluice.aio.AsyncDatabase) -> AsyncGroupCommitter[CommitPlan]:
    store = db._context.store
    assert isinstance(store, PostgresStore)
    assert store._group is not None
    return store._group


async def _commit_grouped(
    db: sluice.aio.AsyncDatabase, txs: list[sluice.aio.AsyncTransaction]
) -> list[BaseException | None]:
    """Commit ``txs`` at once; the first is held inside its write until the others wait
    behind it, who then go as one group. What each commit raised, in order."""
    group = _group(db)
    write = group._commit_many
    queued = asyncio.Event()
    group._queue = Queued(len(txs) - 1, queued.set)  # the committer's own queue
    held = True

    async def first_held(plans: Sequence[CommitPlan]) -> list[BaseException | None]:
        nonlocal held
        if held:
            held = False
            await asyncio.wait_for(queued.wait(), 30)  # the others wait behind it
        return await write(plans)

    group._commit_many = first_held
    try:
        outcomes = await asyncio.gather(*(tx.commit() for tx in txs), return_exceptions=True)
    finally:
        group._commit_many = write
    return [o if isinstance(o, BaseException) else None for o in outcomes]


async def _taken(
    db: sluice.aio.AsyncDatabase, count: int
) -> tuple[list[sluice.aio.AsyncTransaction], list[Any]]:
    txs, messages = [], []
    for _ in range(count):
        tx = db.transaction()
        (m,) = await tx.dequeue("q")
        txs.append(tx)
        messages.append(m)
    return txs, messages


@pytest.mark.parametrize("durability", ["persistent", "transient"])
def test_acknowledgements_made_while_one_commits_go_together(
    url: str, durability: Literal["persistent", "transient"]
) -> None:
    async def main() -> None:
        async with sluice.aio.connect(url) as db:
            q = await db.create_queue("q", durability=durability)
            await q.put_many(list(range(4)))
            txs, _ = await _taken(db, 4)
            assert await _commit_grouped(db, txs) == [None] * 4
            group = _group(db)
            assert (group.commits, group.groups) == (4, 2)  # the first alone, then 3 at once
            assert {k: v for k, v in (await q.stats()).items() if v} == {}

    asyncio.run(main())


def test_a_lost_lease_in_a_group_fails_only_its_own_acknowledgement(url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(url) as db:
            q = await db.create_queue("q")
            await q.put_many(list(range(4)))
            txs, messages = await _taken(db, 4)
            # Recovery gave the third message back behind its holder's back: the
            # group's one statement finds a row short, and each commits alone.
            with psycopg.connect(url.partition("?")[0], autocommit=True) as admin:
                admin.execute(
                    f'UPDATE "{schema_of(url)}".messages SET state = 1, c_session = NULL,'
                    " c_tx = NULL WHERE id = %s",
                    (messages[2].ref,),
                )
            outcomes = await _commit_grouped(db, txs)
            assert [type(o).__name__ for o in outcomes] == [
                "NoneType",
                "NoneType",
                "LeaseLost",
                "NoneType",
            ]
            assert [m.body for m in await q.browse()] == [messages[2].body]

    asyncio.run(main())


def test_many_coroutines_acknowledge_each_message_once(url: str) -> None:
    consumers, total = 8, 400

    async def main() -> None:
        async with sluice.aio.connect(url) as db:
            q = await db.create_queue("q")
            await q.put_many(list(range(total)))
            got: list[int] = []

            async def consume() -> None:
                while (m := await q.get()) is not None:
                    got.append(m.body)
                    await m.ack()

            await asyncio.gather(*(consume() for _ in range(consumers)))
            assert Counter(got) == Counter(range(total))
            assert {k: v for k, v in (await q.stats()).items() if v} == {}
            group = _group(db)
            assert group.commits == total
            assert 1 <= group.groups <= total

    asyncio.run(main())


def test_group_commit_can_be_turned_off(url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(f"{url}&group_commit=false") as db:
            store = db._context.store
            assert isinstance(store, PostgresStore)
            assert store._group is None
            q = await db.create_queue("q")
            await q.put("m")
            m = await q.get()
            assert m is not None
            await m.ack()
            assert (await q.stats())["ready"] == 0

    asyncio.run(main())


def test_enqueues_are_not_grouped(url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(url) as db:
            q = await db.create_queue("q")
            await q.put("m")
            async with db.transaction() as tx:
                await tx.enqueue("q", "n")
            assert _group(db).commits == 0
            m = await q.get()
            assert m is not None
            await m.ack()
            assert _group(db).commits == 1

    asyncio.run(main())
