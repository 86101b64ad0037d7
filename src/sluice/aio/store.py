"""Where an async transaction's steps go: the store's statements, blocking work, waiting.

``drive`` awaits the steps of the engine's transaction logic (engine/steps.py):
``Call`` on an ``AsyncStore``, ``Blocking`` work in the database's thread,
``Wait`` on the wake-ups without a thread. A cancelled coroutine lets the step
in flight finish and its outcome be recorded (a claim that took a message makes
the transaction hold it) before the cancellation is raised at the next step, so
that the caller's abort finds everything that must go back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from sluice.aio.runner import Runner
from sluice.backends.base import TxStore
from sluice.engine.steps import Blocking, Call, Steps
from sluice.engine.wakeups import Wakeups

__all__ = ["AsyncStore", "ThreadedStore", "drive"]

T = TypeVar("T")


class AsyncStore(Protocol):
    """The ``TxStore`` methods, awaited: ``call(Call("claim", args, kwargs))``."""

    async def call(self, step: Call) -> Any:
        """Run the named ``TxStore`` method; its result."""

    async def close(self) -> None:
        """Release the store's connections."""


class ThreadedStore:
    """A synchronous ``TxStore`` (SQLite, memory) run in the database's thread."""

    def __init__(self, store: TxStore, runner: Runner) -> None:
        self._store = store
        self._runner = runner

    async def call(self, step: Call) -> Any:
        return await self._runner(getattr(self._store, step.method), *step.args, **step.kwargs)

    async def close(self) -> None:
        """Nothing: the synchronous backend is closed with its Database."""


async def drive(steps: Steps[T], store: AsyncStore, runner: Runner, wakeups: Wakeups) -> T:
    """Await ``steps``; what they return. Failures are raised into them, as ``steps.run``."""
    result: Any = None
    error: BaseException | None = None
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            step = steps.send(result) if error is None else steps.throw(error)
        except StopIteration as stop:
            if cancelled is not None:
                raise cancelled from None
            value: T = stop.value
            return value
        result, error = None, None
        if cancelled is not None:
            error = cancelled  # the next step is not taken
            continue
        try:
            if isinstance(step, Call):
                result, cancelled = await _finished(store.call(step))
            elif isinstance(step, Blocking):
                result, cancelled = await _finished(runner(step.work))
            else:
                await wakeups.wait_async(
                    step.token, step.timeout, step.queues, step.limit, plain=step.plain
                )
        except BaseException as exc:
            error = exc


async def _finished(work: Awaitable[T]) -> tuple[T, asyncio.CancelledError | None]:
    """``work``'s result, awaited to its end even if the caller is cancelled meanwhile
    (with the cancellation, to be raised once the outcome is recorded)."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task), None
    except asyncio.CancelledError as exc:
        if task.cancelled():
            raise
        return await task, exc
