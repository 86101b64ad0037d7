"""What only sluice.aio has: async for, async tasks, waiting on the loop, cancellation.

The rest of its behaviour is the blocking API's, checked by the contract suites
that import ``both_apis``. Each test runs its coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import sluice
import sluice.aio
from sluice.jobs import Task


def test_async_for_takes_each_message_in_its_own_transaction(backend_url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(backend_url) as db:
            q = await db.create_queue("orders")
            await q.put_many([1, 2, 3])
            seen = []
            async for m in q:
                assert m.holder is not None
                assert m.holder.implicit
                seen.append(m.body)
                await m.ack()
                if len(seen) == 3:
                    break
            assert seen == [1, 2, 3]
            assert (await q.stats())["claimed"] == 0

    asyncio.run(main())


def test_a_waiting_get_wakes_on_another_tasks_commit(backend_url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(backend_url) as db:
            q = await db.create_queue("orders")

            async def produce() -> None:
                await asyncio.sleep(0.2)
                async with db.transaction() as tx:
                    await tx.enqueue("orders", "late")

            producer = asyncio.create_task(produce())
            started = time.monotonic()
            m = await q.get(wait=20)
            assert m is not None
            assert m.body == "late"
            assert time.monotonic() - started < 5  # woken by the commit, not the timeout
            await m.ack()
            await producer

    asyncio.run(main())


def test_a_cancelled_get_loses_nothing_and_holds_nothing(backend_url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(backend_url) as db:
            q = await db.create_queue("orders")
            waiting = asyncio.create_task(q.get(wait=30))
            await asyncio.sleep(0.1)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            # Cancelled while its claim may be in flight: whatever it took goes back.
            await q.put_many(["a", "b"])
            racing = [asyncio.create_task(q.get(wait=1)) for _ in range(4)]
            await asyncio.sleep(0)
            for task in racing:
                task.cancel()
            await asyncio.gather(*racing, return_exceptions=True)
            for task in racing:
                taken = None if task.cancelled() else task.result()
                if taken is not None:
                    await taken.release()
            assert (await q.stats())["claimed"] == 0
            bodies = sorted([m.body for m in await q.browse()])
            assert bodies == ["a", "b"]

    asyncio.run(main())


def test_concurrent_consumers_each_get_distinct_messages(backend_url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(backend_url) as db:
            q = await db.create_queue("orders")
            await q.put_many(list(range(40)))

            async def consume() -> list[int]:
                taken = []
                while (m := await q.get(wait=0.2)) is not None:
                    taken.append(m.body)
                    await m.ack()
                return taken

            results = await asyncio.gather(*(consume() for _ in range(8)))
            everything = [n for taken in results for n in taken]
            assert sorted(everything) == list(range(40))  # each once: none lost, none twice

    asyncio.run(main())


def test_a_worker_runs_async_and_plain_task_functions(backend_url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(backend_url) as db:
            await db.create_queue("done")
            loop = asyncio.get_running_loop()
            ran_on: list[bool] = []

            @db.task("fetch")
            async def fetch(task: Task) -> None:
                ran_on.append(asyncio.get_running_loop() is loop)
                await asyncio.sleep(0)
                task.enqueue("done", {"fetched": task.body})

            @db.task("count")
            def count(task: Task) -> None:
                task.enqueue("done", {"counted": task.body})

            await db.run_sync(db.sync.jobs.submit_task, "fetch", 1)
            await db.run_sync(db.sync.jobs.submit_task, "count", 2)
            assert await db.worker().run_until_idle() == 2
            assert ran_on == [True]
            done = await (await db.queue("done")).browse()
            assert sorted(map(str, (m.body for m in done))) == [
                "{'counted': 2}",
                "{'fetched': 1}",
            ]

    asyncio.run(main())


def test_an_async_task_past_its_timeout_is_retried(backend_url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(backend_url) as db:
            runs = 0

            @db.task("slow", timeout=0.05, max_attempts=2, backoff=0.0)
            async def slow(task: Task) -> None:
                nonlocal runs
                runs += 1
                if runs == 1:
                    await asyncio.sleep(5)

            await db.run_sync(db.sync.jobs.submit_task, "slow", None)
            worker = db.worker()
            await worker.run_until_idle()
            await asyncio.sleep(0.05)
            await worker.run_until_idle()
            assert runs == 2

    asyncio.run(main())


def test_a_worker_runs_until_stopped(backend_url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(backend_url) as db:
            finished = asyncio.Event()

            @db.task("ping")
            async def ping(task: Task) -> None:
                finished.set()

            worker = db.worker(poll=0.1)
            running = asyncio.create_task(worker.run())
            await asyncio.sleep(0.1)  # idle, waiting on the loop
            await db.run_sync(db.sync.jobs.submit_task, "ping", None)
            await asyncio.wait_for(finished.wait(), 10)
            worker.stop()
            await asyncio.wait_for(running, 10)
            assert worker.processed == 1

    asyncio.run(main())


def test_the_blocking_errors_are_raised(backend_url: str) -> None:
    async def main() -> None:
        async with sluice.aio.connect(backend_url) as db:
            with pytest.raises(sluice.QueueNotFound):
                await db.queue("missing")
            q = await db.create_queue("orders")
            await q.put("x")
            m = await q.get()
            assert m is not None
            await m.ack()
            with pytest.raises(sluice.MessageStateError):
                await m.ack()
            tx = db.begin()
            await tx.abort()
            with pytest.raises(sluice.TransactionClosed):
                await tx.enqueue("orders", "y")

    asyncio.run(main())


def test_a_blocking_feature_missing_from_asyncio_points_to_db_sync() -> None:
    async def main() -> None:
        async with await sluice.aio.connect("memory://") as db:
            with pytest.raises(AttributeError, match=r"reached through db\.sync\.jobs"):
                db.jobs  # noqa: B018
            with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
                db.nonsense  # noqa: B018
            assert db.sync.jobs is not None

    asyncio.run(main())
