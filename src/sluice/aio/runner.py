"""The thread that blocking work of an ``AsyncDatabase`` runs in, off the event loop.

One thread per database: the SQLite and memory backends serialize their
statements through one connection anyway, and one thread keeps the order in
which coroutines asked. Nothing in it waits for news (waiting is the loop's,
``Wakeups.wait_async``), so a get that waits never holds it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["Runner"]

P = ParamSpec("P")
T = TypeVar("T")


class Runner:
    """Runs blocking calls in the database's one thread; awaited from the loop."""

    def __init__(self, name: str = "sluice-aio") -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def __call__(self, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(work, *args, **kwargs))

    def close(self) -> None:
        """Let the thread end once the work already given to it is done."""
        self._executor.shutdown(wait=False)
