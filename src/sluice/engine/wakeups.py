"""Waking blocked consumers without busy polling.

In-process, a commit that makes messages available bumps a counter under a
condition variable. Across processes sharing a database, waiters also check the
backend's change token (for SQLite, ``PRAGMA data_version``) every
``poll_interval``: one cheap read, never a query over the queue.
"""

from __future__ import annotations

import threading
import time

from sluice.backends.base import Backend

__all__ = ["Token", "Wakeups"]

Token = tuple[int, int]


class Wakeups:
    """The change signal of one Database."""

    def __init__(self, backend: Backend, poll_interval: float) -> None:
        self._backend = backend
        self._poll = poll_interval
        self._cond = threading.Condition()
        self._counter = 0
        backend.on_change(self.notify)

    def token(self) -> Token:
        """Take before looking for work; ``wait`` returns early if anything changed since."""
        remote = self._backend.change_token() if self._backend.shared_across_processes else 0
        return self._counter, remote

    def notify(self) -> None:
        """Tell waiters that messages may have become available."""
        with self._cond:
            self._counter += 1
            self._cond.notify_all()

    def wait(self, token: Token, timeout: float) -> None:
        """Block until something changed after ``token`` was taken, or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        shared = self._backend.shared_across_processes
        while True:
            with self._cond:
                remaining = deadline - time.monotonic()
                if self._counter != token[0] or remaining <= 0:
                    return
                self._cond.wait(min(remaining, self._poll) if shared else remaining)
                if self._counter != token[0]:
                    return
            # Outside the condition: the backend may be busy with another thread's commit.
            if shared and self._backend.change_token() != token[1]:
                return
