"""The app's own threads for the routes' blocking database calls.

FastAPI's (anyio's) thread pool costs the event loop a capacity limiter, a task-group
check and a context copy per call: about twice a bare ``run_in_executor`` on this
project's machines, paid by every enqueue. The hot routes hand their transaction to a
small pool of this app's instead. Few threads, because every one of them runs Python
under the one GIL the event loop needs too: more threads than commits that can share an
fsync only make them take turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["THREADS", "Offload"]

THREADS = 8
"""Threads by default: enough for eight commits to share one fsync (group commit)."""

_P = ParamSpec("_P")
_T = TypeVar("_T")


class Offload:
    """``await offload(fn, *args)`` runs ``fn`` on one of ``threads`` threads."""

    def __init__(self, threads: int = THREADS) -> None:
        if threads < 1:
            raise ValueError(f"an offload pool needs a thread or more, not {threads!r}")
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="sluice-route")

    async def __call__(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        if kwargs:
            raise TypeError("Offload passes positional arguments only")
        # Not cancelled by a client that goes away: the call runs to its end (a
        # transaction commits or not as a whole), only its answer is not sent.
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        """Wait for the calls under way, then end the threads."""
        self._pool.shutdown(wait=True)
