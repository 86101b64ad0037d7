"""What the parts of ``sluice.aio`` share: the blocking Database, its thread, the store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from sluice.aio.runner import Runner
from sluice.aio.store import AsyncStore, drive
from sluice.database import Database
from sluice.engine.context import EngineContext
from sluice.engine.steps import Steps

__all__ = ["AsyncContext"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AsyncContext:
    """One ``AsyncDatabase``'s blocking Database, thread and store."""

    database: Database
    runner: Runner
    store: AsyncStore

    @property
    def engine(self) -> EngineContext:
        return self.database.context

    async def steps(self, steps: Steps[T]) -> T:
        """Await a transaction's steps on this database."""
        return await drive(steps, self.store, self.runner, self.engine.wakeups)

    async def content(self, queue: str) -> None:
        """Have ``queue``'s settings and content rules cached, read in the thread if not,
        so that what follows on the loop reads no catalog."""
        if not self.engine.is_cached(queue):
            await self.runner(self.engine.content, queue)
