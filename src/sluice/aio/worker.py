"""A worker for asyncio: ``async def`` task functions run on the event loop.

The worker's bookkeeping (taking tasks within their profiles, settling them in
their transaction) is the blocking ``Worker``'s, run in threads of the worker's
own; an ``async def`` function is run on the loop (its ``timeout`` by
``asyncio.timeout``), a plain one in the worker's thread as the blocking worker
runs it. An idle worker waits for news on the loop, without a thread.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sluice.engine.wakeups import Token
from sluice.errors import SluiceError, TaskTimeout
from sluice.jobs.model import TaskType
from sluice.jobs.task import Task
from sluice.jobs.worker import Worker

__all__ = ["AsyncWorker", "LoopWorker"]


class LoopWorker(Worker):
    """The blocking worker, but ``async def`` functions are run on ``loop``."""

    def __init__(self, *args: Any, loop: asyncio.AbstractEventLoop, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loop = loop

    def _call(self, task_type: TaskType, task: Task) -> BaseException | None:
        function = self._functions[task_type.name]
        if not inspect.iscoroutinefunction(function):
            return super()._call(task_type, task)
        running = asyncio.run_coroutine_threadsafe(
            _within(function(task), task_type.timeout), self.loop
        )
        try:
            running.result()
        except (Exception, TaskTimeout) as exc:
            return exc
        return None


class AsyncWorker:
    """Runs the task functions of ``@db.task``; see ``AsyncDatabase.worker``."""

    def __init__(self, worker: LoopWorker) -> None:
        self._worker = worker
        self._pool = ThreadPoolExecutor(worker.concurrency, thread_name_prefix="sluice-aio-worker")
        self._stopping = asyncio.Event()

    @property
    def processed(self) -> int:
        """Tasks settled so far."""
        return self._worker.processed

    async def run_until_idle(self, max_tasks: int | None = None) -> int:
        """Run tasks until none can start now; how many ran (tests, demos)."""
        return await self._worker.loop.run_in_executor(
            self._pool, self._worker.run_until_idle, max_tasks
        )

    async def run(self) -> None:
        """Work until ``stop()`` or cancelled, ``concurrency`` tasks at a time."""
        self._stopping.clear()
        await asyncio.gather(*(self._work() for _ in range(self._worker.concurrency)))

    def stop(self) -> None:
        """Have ``run`` return once the tasks in hand are done."""
        self._stopping.set()
        self._worker.stop()  # wakes the waiting

    async def _work(self) -> None:
        worker, loop = self._worker, self._worker.loop
        wakeups = worker.context_wakeups
        token: Token | None = None
        while not self._stopping.is_set():
            failed = False
            try:
                until = await loop.run_in_executor(self._pool, worker.work_once)
            except SluiceError:
                until, failed = worker.poll, True
            if until <= 0 or self._stopping.is_set():
                token = None
            elif token is None and not failed:
                token = wakeups.token()
            else:  # as the blocking worker's loop: a look came up empty, so wait for news
                real = min(worker.real_seconds(until), worker.poll)
                await wakeups.wait_async(token or wakeups.token(), real, worker.queues)
                token = wakeups.token()


async def _within(work: Coroutine[Any, Any, Any], timeout: float | None) -> None:
    """Await a task function's coroutine; TaskTimeout once ``timeout`` seconds pass."""
    limit = asyncio.timeout(timeout)
    try:
        async with limit:
            await work
    except TimeoutError:
        if not limit.expired():
            raise  # the function's own
        raise TaskTimeout(f"the task ran past its timeout of {timeout} s") from None
