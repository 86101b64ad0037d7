"""Waiters on several queues, from threads and from asyncio: woken by news, just enough of them.

The backend is the in-memory one, whose news is all in-process (nothing to poll).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from sluice.backends.memory import MemoryBackend
from sluice.engine.wakeups import Wakeups


@pytest.fixture
def wakeups() -> Iterator[Wakeups]:
    backend = MemoryBackend()
    try:
        yield Wakeups(backend, poll_interval=0.05)
    finally:
        backend.close()


def test_a_thread_waiting_on_two_queues_wakes_for_the_second(wakeups: Wakeups) -> None:
    token = wakeups.token()
    woke = threading.Event()

    def waiter() -> None:
        wakeups.wait(token, 30.0, ["a", "b"])
        woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    wakeups.notify("b", 1)
    assert woke.wait(10)
    thread.join()


def test_news_since_the_token_ends_a_wait_at_once(wakeups: Wakeups) -> None:
    token = wakeups.token()
    wakeups.notify("elsewhere", 1)
    wakeups.wait(token, 30.0, ["a"])  # returns: the caller must look again


async def _waiting(wakeups: Wakeups, queues: list[str], limit: int = 1) -> asyncio.Task[None]:
    task = asyncio.create_task(wakeups.wait_async(wakeups.token(), 30.0, queues, limit))
    await asyncio.sleep(0)  # the task runs up to its first await: registered
    return task


async def _settle() -> None:
    for _ in range(10):  # call_soon_threadsafe's callback, then the tasks it resumes
        await asyncio.sleep(0)


def test_a_commit_of_n_messages_wakes_n_waiters_and_a_waiter_counts_once(
    wakeups: Wakeups,
) -> None:
    async def scenario() -> None:
        both = await _waiting(wakeups, ["a", "b"])
        only_b = await _waiting(wakeups, ["b"])
        pair = await _waiting(wakeups, ["b"], limit=2)
        wakeups.notify("a", 1)
        await _settle()
        assert both.done()
        assert not only_b.done()
        # `both` still stands in b's line, woken: it must not take b's message.
        wakeups.notify("b", 1)
        await _settle()
        assert only_b.done()
        assert not pair.done()
        wakeups.notify("b", 2)
        await _settle()
        assert pair.done()

    asyncio.run(scenario())


def test_many_awaiters_need_no_thread_each_and_a_thread_can_wake_them(
    wakeups: Wakeups,
) -> None:
    threads = threading.active_count()

    async def scenario() -> None:
        tasks = [await _waiting(wakeups, ["a", f"own{n}"]) for n in range(500)]
        assert threading.active_count() == threads
        wakeups.notify("a", 200)
        await _settle()
        assert sum(t.done() for t in tasks) == 200
        # From another thread, as a commit or the backend's listener does.
        notifier = threading.Thread(target=wakeups.notify)
        notifier.start()
        notifier.join()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)

    asyncio.run(scenario())
    assert threading.active_count() == threads


def test_a_cancelled_or_timed_out_awaiter_leaves_its_queues(wakeups: Wakeups) -> None:
    async def scenario() -> None:
        cancelled = await _waiting(wakeups, ["a", "b"])
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await wakeups.wait_async(wakeups.token(), 0.01, ["a"])
        later = await _waiting(wakeups, ["a"])
        wakeups.notify("a", 1)  # for `later`: nobody gone stands before it
        await _settle()
        assert later.done()

    asyncio.run(scenario())


class _Polled(MemoryBackend):
    """A backend that can only be polled: its token moves when told."""

    polled_for_changes = True

    def __init__(self) -> None:
        super().__init__()
        self.version = 0

    def change_token(self) -> int:
        return self.version


def test_an_awaiter_on_a_polled_backend_sees_the_token_move() -> None:
    backend = _Polled()
    wakeups = Wakeups(backend, poll_interval=0.01)

    async def scenario() -> None:
        task = await _waiting(wakeups, ["a"])
        backend.version += 1
        await asyncio.wait_for(task, 10)

    try:
        asyncio.run(scenario())
    finally:
        backend.close()


# A queue found empty stays quiet while all its news goes to waiters that take it whole.


def _found_empty(wakeups: Wakeups, queue: str = "a", due: float | None = None) -> None:
    wakeups.found_empty(queue, wakeups.token(), due)


def _waiter(wakeups: Wakeups, queue: str, limit: int, *, plain: bool = True) -> threading.Thread:
    """A thread waiting on ``queue``, returned once it stands in the queue's line."""
    token = wakeups.token()
    thread = threading.Thread(
        target=wakeups.wait, args=(token, 30.0, [queue], limit), kwargs={"plain": plain}
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not wakeups.waiting().get(queue):  # no sleep: registering is quick
        assert time.monotonic() < deadline, "the waiter never registered"
    return thread


def test_a_queue_found_empty_is_quiet_until_news_its_waiters_cannot_take(
    wakeups: Wakeups,
) -> None:
    assert not wakeups.quiet("a", wakeups.token(), 0.0)  # nobody looked yet
    _found_empty(wakeups)
    assert wakeups.quiet("a", wakeups.token(), 0.0)
    assert not wakeups.quiet("b", wakeups.token(), 0.0)

    thread = _waiter(wakeups, "a", limit=10)
    wakeups.notify("a", 10)  # all of it to the waiter: a newcomer would find nothing
    thread.join()
    assert wakeups.quiet("a", wakeups.token(), 0.0)

    thread = _waiter(wakeups, "a", limit=10)
    wakeups.notify("a", 11)  # one more than the waiter takes
    thread.join()
    assert not wakeups.quiet("a", wakeups.token(), 0.0)


def test_news_without_a_count_or_a_queue_ends_quiet(wakeups: Wakeups) -> None:
    _found_empty(wakeups, "a")
    _found_empty(wakeups, "b")
    wakeups.notify("a")  # another process committed to a: how much is not known
    assert not wakeups.quiet("a", wakeups.token(), 0.0)
    assert wakeups.quiet("b", wakeups.token(), 0.0)
    wakeups.notify()  # anywhere (recovery, the fallback tick)
    assert not wakeups.quiet("b", wakeups.token(), 0.0)
    _found_empty(wakeups, "a")
    wakeups.notify("a", 1)  # nobody waits to take it
    assert not wakeups.quiet("a", wakeups.token(), 0.0)


def test_news_between_the_claims_token_and_its_answer_keeps_the_queue_unquiet(
    wakeups: Wakeups,
) -> None:
    token = wakeups.token()  # taken before the claim
    wakeups.notify("elsewhere", 1)  # the claim may or may not have seen what came
    wakeups.found_empty("a", token, None)
    assert not wakeups.quiet("a", wakeups.token(), 0.0)


def test_a_due_delayed_message_ends_quiet(wakeups: Wakeups) -> None:
    _found_empty(wakeups, "a", due=100.0)
    assert wakeups.quiet("a", wakeups.token(), 99.0)
    assert not wakeups.quiet("a", wakeups.token(), 100.0)


def test_news_that_woke_a_waiter_other_than_a_plain_claimer_ends_quiet(wakeups: Wakeups) -> None:
    """A selective consumer, a browser or a worker may leave what it was woken for."""
    _found_empty(wakeups)
    thread = _waiter(wakeups, "a", limit=10, plain=False)
    wakeups.notify("a", 1)
    thread.join()
    assert not wakeups.quiet("a", wakeups.token(), 0.0)
