"""Waking blocked consumers without busy polling, and without waking them all.

In-process, a commit that makes ``n`` messages available in a queue wakes just
enough of that queue's waiters to take them (by the limits they asked for, in
the order they started waiting), not every thread blocked anywhere: a herd of
consumers woken for one batch would spend a round trip each to find nothing.
News that is not so precise (another process committed, recovery ran, a
transaction published pending rows) wakes everyone.

Across processes, the backend either pushes news (PostgreSQL's LISTEN, through
``on_change``) or waiters check its change token (SQLite's ``PRAGMA
data_version``) every ``poll_interval``: one cheap read, never a query over
the queue.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from sluice.backends.base import Backend

__all__ = ["Token", "Wakeups"]

Token = tuple[int, int]


class _Waiter:
    __slots__ = ("event", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.event = threading.Event()


class Wakeups:
    """The change signal of one Database."""

    def __init__(self, backend: Backend, poll_interval: float) -> None:
        self._backend = backend
        self._poll = poll_interval
        self._lock = threading.Lock()
        self._counter = 0  # bumped by every notify: a waiter checks it before sleeping
        self._waiters: dict[str, deque[_Waiter]] = {}
        backend.on_change(self.notify)

    def token(self) -> Token:
        """Take before looking for work; ``wait`` returns early if anything changed since."""
        remote = self._backend.change_token() if self._backend.polled_for_changes else 0
        return self._counter, remote

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
                            w.event.set()
                        waiters.clear()
                return
            pending = self._waiters.get(queue)
            while pending and count > 0:
                w = pending.popleft()
                w.event.set()
                count -= w.limit

    def wait(self, token: Token, timeout: float, queue: str, limit: int = 1) -> None:
        """Block until news for ``queue`` came after ``token`` was taken, or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        polled = self._backend.polled_for_changes
        waiter = _Waiter(limit)
        with self._lock:
            if self._counter != token[0]:
                return  # something happened since the caller looked: look again
            self._waiters.setdefault(queue, deque()).append(waiter)
        try:
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
            with self._lock:
                waiters = self._waiters.get(queue)
                if waiters is not None and not waiter.event.is_set():
                    waiters.remove(waiter)
