"""Waking blocked consumers without busy polling, and without waking them all.

A waiter waits on one or several queues, from a thread (``wait``) or from an
asyncio task (``wait_async``: a future resolved through the loop, no thread).
In-process, a commit that makes ``n`` messages available in a queue wakes just
enough of that queue's waiters to take them (by the limits they asked for, in
the order they started waiting), not every waiter: a herd of consumers woken
for one batch would spend a round trip each to find nothing. News that is not
so precise (another process committed, recovery ran, a transaction published
pending rows) wakes everyone.

A queue found empty stays known as empty (``quiet``) while every news of it since went
to waiters that take it all: a consumer that comes back for more then waits with them
instead of spending a round trip on a claim that would find nothing (or race the woken
waiter for its batch). Any other news of the queue ends that.

Across processes, the backend either pushes news through ``on_change``
(PostgreSQL's LISTEN, SQLite's file watcher on Linux) or waiters check its
change token (SQLite's ``PRAGMA data_version``) every ``poll_interval``: one
cheap read, never a query over the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterable

from sluice.backends.base import Backend

__all__ = ["NO_TOKEN", "Token", "Wakeups"]

Token = tuple[int, int]

NO_TOKEN: Token = (0, 0)
"""What a take that will not wait holds: it is never compared."""


class _Waiter:
    """One blocked caller, registered in each queue it waits on; woken at most once.

    ``plain``: it will make a plain claim (take_steps), so it takes what it is woken for,
    up to ``limit``; any other (a selection, a browser, a worker) may leave some.
    """

    __slots__ = ("limit", "plain", "woken")

    def __init__(self, limit: int, plain: bool = False) -> None:
        self.limit = limit
        self.plain = plain
        self.woken = False

    def wake(self) -> None:
        """Called with the Wakeups lock held."""
        self.woken = True


class _ThreadWaiter(_Waiter):
    __slots__ = ("event",)

    def __init__(
        self, limit: int, event: threading.Event | None = None, plain: bool = False
    ) -> None:
        super().__init__(limit, plain)
        self.event = threading.Event() if event is None else event

    def wake(self) -> None:
        super().wake()
        self.event.set()


class _TaskWaiter(_Waiter):
    __slots__ = ("future", "loop")

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop, plain: bool = False) -> None:
        super().__init__(limit, plain)
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()

    def wake(self) -> None:
        super().wake()
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits this any more
            self.loop.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        if not self.future.done():  # a cancelled wait leaves a cancelled future
            self.future.set_result(None)


def _names(queues: str | Iterable[str]) -> tuple[str, ...]:
    return (queues,) if isinstance(queues, str) else tuple(queues)


class Wakeups:
    """The change signal of one Database."""

    def __init__(self, backend: Backend, poll_interval: float) -> None:
        self._backend = backend
        self._poll = poll_interval
        self._lock = threading.Lock()
        self._counter = 0  # bumped by every notify: a waiter checks it before sleeping
        self._waiters: dict[str, deque[_Waiter]] = {}
        self._waiting = 0  # registered waiters: the backend pushes news only while some wait
        # Queues found empty with no news since but what waiters took in full: queue ->
        # (the backend's change token then, when its next delayed message is due).
        self._quiet: dict[str, tuple[int, float | None]] = {}
        backend.on_change(self.notify)

    def token(self) -> Token:
        """Take before looking for work; ``wait`` returns early if anything changed since."""
        return self._counter, self._backend.change_token()

    def notify(self, queue: str | None = None, count: int | None = None) -> None:
        """Messages may have become available: ``count`` (None: some) of them in ``queue``.

        ``queue`` None: anywhere.
        """
        with self._lock:
            self._counter += 1
            if queue is None or count is None:
                groups = self._waiters.values() if queue is None else [self._waiters.get(queue)]
                for waiters in groups:
                    if waiters:
                        for w in waiters:
                            w.wake()
                        waiters.clear()
                if queue is None:
                    self._quiet.clear()
                else:
                    self._quiet.pop(queue, None)
                return
            pending = self._waiters.get(queue)
            taken_whole = True
            while pending and count > 0:
                w = pending.popleft()
                if not w.woken:  # else woken already through another of its queues
                    w.wake()
                    count -= w.limit
                    taken_whole = taken_whole and w.plain
            if count > 0 or not taken_whole:  # a newcomer may find some
                self._quiet.pop(queue, None)

    def found_empty(self, queue: str, token: Token, due: float | None) -> None:
        """A plain claim on ``queue`` (taken at ``token``) found nothing, and ``due`` is
        when its next delayed message is: if no news came since, it is ``quiet``."""
        with self._lock:
            if self._counter == token[0]:
                self._quiet[queue] = (token[1], due)

    def quiet(self, queue: str, token: Token, now: float) -> bool:
        """Whether a plain claim on ``queue`` at ``token`` can only find nothing, as far as
        this process knows: ``found_empty`` with no news since but what waiters took in
        full, the backend's token unchanged and no delayed message due by ``now``.

        A hint for a consumer about to wait anyway (it may wait instead of claiming),
        never a reason to report a queue empty: news from elsewhere arrives late.
        """
        known = self._quiet.get(queue)
        return known is not None and known[0] == token[1] and (known[1] is None or known[1] > now)

    def waiting(self) -> dict[str, int]:
        """Waiters of this process not yet woken, by queue (one waiting on two queues
        counts in both): consumers blocked in ``get(wait=...)`` and the like."""
        with self._lock:
            counts = {q: sum(not w.woken for w in ws) for q, ws in self._waiters.items()}
        return {q: n for q, n in counts.items() if n}

    def wait(
        self,
        token: Token,
        timeout: float,
        queues: str | Iterable[str],
        limit: int = 1,
        *,
        event: threading.Event | None = None,
        plain: bool = False,
    ) -> None:
        """Block until news for any of ``queues`` came after ``token``, or ``timeout`` passed.

        ``limit``: how many messages the caller will take, so that a commit of
        a few messages wakes no more callers than can have them. ``event``: the
        caller's own, set by news as by anyone else who wants the wait to end. ``plain``:
        the caller will make a plain claim of ``limit`` (see ``quiet``).
        """
        deadline = time.monotonic() + timeout
        polled = self._backend.polled_for_changes
        names = _names(queues)
        waiter = _ThreadWaiter(limit, event, plain)
        if not self._register(token, waiter, names):
            return
        try:
            if self._backend.change_token() != token[1]:
                return  # another process committed before the backend was told to watch
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                if waiter.event.wait(min(remaining, self._poll) if polled else remaining):
                    return
                # The backend may be busy with another thread's commit: checked unlocked.
                if polled and self._backend.change_token() != token[1]:
                    return
        finally:
            self._unregister(waiter, names)

    async def wait_async(
        self,
        token: Token,
        timeout: float,
        queues: str | Iterable[str],
        limit: int = 1,
        *,
        plain: bool = False,
    ) -> None:
        """``wait`` for an asyncio task: awaits a future that ``notify`` resolves.

        No thread per waiter; where the backend must be polled, the check runs
        in the loop's default executor (shared, bounded), never on the loop.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        polled = self._backend.polled_for_changes
        names = _names(queues)
        waiter = _TaskWaiter(limit, loop, plain)
        if not self._register(token, waiter, names):
            return
        try:
            # (A backend without a token says 0: no executor round trip for it.)
            if (
                token[1]
                and await loop.run_in_executor(None, self._backend.change_token) != token[1]
            ):
                return  # another process committed before the backend was told to watch
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return
                pause = min(remaining, self._poll) if polled else remaining
                done, _ = await asyncio.wait({waiter.future}, timeout=pause)
                if done:
                    return
                if polled:
                    remote = await loop.run_in_executor(None, self._backend.change_token)
                    if remote != token[1]:
                        return
        finally:
            self._unregister(waiter, names)

    def _register(self, token: Token, waiter: _Waiter, queues: tuple[str, ...]) -> bool:
        """Enter the waiter in its queues; False if news came since ``token`` (look again)."""
        with self._lock:
            if self._counter != token[0]:
                return False
            for queue in queues:
                self._waiters.setdefault(queue, deque()).append(waiter)
            self._waiting += 1
            if self._waiting == 1:
                self._backend.waiting(True)
            return True

    def _unregister(self, waiter: _Waiter, queues: tuple[str, ...]) -> None:
        with self._lock:
            for queue in queues:
                waiters = self._waiters.get(queue)
                # Woken through one queue, it may still stand in the others.
                if waiters is not None and waiter in waiters:
                    waiters.remove(waiter)
            self._waiting -= 1
            if self._waiting == 0:
                self._backend.waiting(False)
