"""Group commit on an event loop: acknowledgements that coroutines make while another is
being written go to the database together, in one transaction and one round trip.

The blocking ``GroupCommitter``'s design on asyncio. The first commit with none in flight
is written at once, by its own coroutine (a lone consumer pays nothing). Commits that
arrive meanwhile wait in a queue; when the write in flight ends, one task writes all of
them with ``commit_many`` and goes on while more keep arriving. Each commit still
succeeds or fails on its own (``commit_many`` returns what each failed with).

A waiter cancelled before its commit was taken from the queue is removed and never
written; once taken, it is written whether or not anyone still waits for it, as a
commit cancelled during its own round trip is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["AsyncGroupCommitter"]

P = TypeVar("P")

_Waiting = tuple[P, "asyncio.Future[BaseException | None]"]


class AsyncGroupCommitter(Generic[P]):
    """Runs ``commit_many`` over whatever commits are waiting, one group at a time.

    ``commit_many`` returns, per plan, None or the exception that plan failed with; if it
    raises, every plan of the group failed with that exception.
    """

    def __init__(
        self, commit_many: Callable[[Sequence[P]], Awaitable[list[BaseException | None]]]
    ) -> None:
        self._commit_many = commit_many
        self._queue: list[_Waiting[P]] = []
        self._writing = False
        self._writer: asyncio.Task[None] | None = None  # referenced, so it is not collected
        self.groups = 0
        self.commits = 0

    async def commit(self, plan: P) -> None:
        """Commit ``plan`` with whatever else is waiting; raises what ``plan`` failed with."""
        if not self._writing:
            self._writing = True
            try:
                (error,) = await self._run([plan])
            finally:
                self._next()
            if error is not None:
                raise error
            return
        waiting: _Waiting[P] = (plan, asyncio.get_running_loop().create_future())
        self._queue.append(waiting)
        try:
            error = await waiting[1]
        except asyncio.CancelledError:
            if waiting in self._queue:  # not taken yet: it will not be written
                self._queue.remove(waiting)
            raise
        if error is not None:
            raise error

    async def _run(self, plans: list[P]) -> list[BaseException | None]:
        try:
            results = await self._commit_many(plans)
        except Exception as exc:  # the whole group failed: nothing of it committed
            results = [exc] * len(plans)
        self.groups += 1
        self.commits += len(plans)
        return results

    def _next(self) -> None:
        """After a write: a task writes what queued meanwhile, or writing stops."""
        if self._queue:
            self._writer = asyncio.get_running_loop().create_task(self._write_queued())
        else:
            self._writing = False

    async def _write_queued(self) -> None:
        try:
            while self._queue:
                group, self._queue = self._queue, []
                try:
                    results = await self._run([plan for plan, _ in group])
                except BaseException:  # cancelled (the loop closing): no one waits on
                    for _, future in (*group, *self._queue):
                        future.cancel()
                    self._queue = []
                    raise
                for (_, future), error in zip(group, results, strict=True):
                    if not future.done():  # its waiter may have been cancelled
                        future.set_result(error)
        finally:
            self._writing = False
            self._writer = None
