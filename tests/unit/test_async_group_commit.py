"""AsyncGroupCommitter on its own: who writes when, what each commit raises, and what a
cancelled waiter leaves behind. ``commit_many`` here is a recorder that the test holds
inside a write until it lets go, so every grouping below is forced, not timed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from sluice.aio.group_commit import AsyncGroupCommitter


class _Writer:
    """A ``commit_many`` that records its groups; each write says it has begun
    (``entered``) and then waits for a permit (``let_one``) unless the writer is open."""

    def __init__(self, *, open_: bool = False) -> None:
        self.groups: list[list[str]] = []
        self.entered: asyncio.Queue[None] = asyncio.Queue()
        self.permits = asyncio.Semaphore(0)
        self.open = open_
        self.failing: dict[str, BaseException] = {}
        self.broken: BaseException | None = None

    async def __call__(self, plans: Sequence[str]) -> list[BaseException | None]:
        self.groups.append(list(plans))
        self.entered.put_nowait(None)
        if not self.open:
            await self.permits.acquire()
        if self.broken is not None:
            raise self.broken
        return [self.failing.get(p) for p in plans]

    def let_all(self) -> None:
        self.open = True
        self.permits.release()
        self.permits.release()


async def _queued(group: AsyncGroupCommitter[str], count: int) -> None:
    while len(group._queue) < count:  # the committer's own queue: what waits for a write
        await asyncio.sleep(0)


async def _behind_a_write(
    group: AsyncGroupCommitter[str], writer: _Writer, plans: str
) -> list[asyncio.Task[None]]:
    """Commit "a" and hold it in its write while ``plans`` are committed and queue up
    behind it. The tasks, "a"'s first."""
    first = asyncio.create_task(group.commit("a"))
    await writer.entered.get()
    rest = [asyncio.create_task(group.commit(p)) for p in plans]
    await _queued(group, len(plans))
    return [first, *rest]


def test_a_lone_commit_is_written_at_once_by_its_own_coroutine() -> None:
    async def main() -> None:
        writer = _Writer(open_=True)
        group = AsyncGroupCommitter(writer)
        await group.commit("a")
        await group.commit("b")
        assert writer.groups == [["a"], ["b"]]
        assert (group.commits, group.groups) == (2, 2)
        assert group._writer is None  # no task was needed

    asyncio.run(main())


def test_commits_made_during_a_write_go_in_the_next_write_together() -> None:
    async def main() -> None:
        writer = _Writer()
        group = AsyncGroupCommitter(writer)
        tasks = await _behind_a_write(group, writer, "bcd")
        writer.let_all()
        await asyncio.gather(*tasks)
        assert writer.groups == [["a"], ["b", "c", "d"]]
        assert (group.commits, group.groups) == (4, 2)

    asyncio.run(main())


def test_each_commit_raises_only_its_own_failure() -> None:
    async def main() -> None:
        writer = _Writer()
        writer.failing["c"] = LookupError("c's lease was lost")
        group = AsyncGroupCommitter(writer)
        tasks = await _behind_a_write(group, writer, "bcd")
        writer.let_all()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert [type(o).__name__ for o in outcomes] == [
            "NoneType",
            "NoneType",
            "LookupError",
            "NoneType",
        ]

    asyncio.run(main())


def test_a_write_that_raises_fails_every_commit_of_its_group() -> None:
    async def main() -> None:
        writer = _Writer()
        group = AsyncGroupCommitter(writer)
        tasks = await _behind_a_write(group, writer, "bc")
        writer.broken = ConnectionError("server gone")
        writer.let_all()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(o, ConnectionError) for o in outcomes)
        # Writing stopped with the failure: the next commit is written at once again.
        writer.broken = None
        await group.commit("d")
        assert writer.groups[-1] == ["d"]

    asyncio.run(main())


def test_a_waiter_cancelled_before_its_write_is_never_written() -> None:
    async def main() -> None:
        writer = _Writer()
        group = AsyncGroupCommitter(writer)
        first, gone, kept = await _behind_a_write(group, writer, "bc")
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        writer.let_all()
        await asyncio.gather(first, kept)
        assert writer.groups == [["a"], ["c"]]

    asyncio.run(main())


def test_a_waiter_cancelled_during_its_write_is_written_all_the_same() -> None:
    async def main() -> None:
        writer = _Writer()
        group = AsyncGroupCommitter(writer)
        first, waiter = await _behind_a_write(group, writer, "b")
        writer.permits.release()  # the first write ends; the task takes "b" and holds
        await first
        await writer.entered.get()
        assert writer.groups == [["a"], ["b"]]
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        task = group._writer  # the task that writes what queued
        assert task is not None
        writer.permits.release()
        await task  # the write ends although no one waits for it, and the task cleanly
        assert not group._writing
        assert (group.commits, group.groups) == (2, 2)

    asyncio.run(main())
