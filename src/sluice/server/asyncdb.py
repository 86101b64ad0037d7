"""The server's asyncio API over its Database (``sluice.aio.attach``): routes that wait
for messages (long polls, event streams) take and settle through it, so a waiting
client holds no thread. Made on the server's event loop when a route first needs it,
closed with the app; the Database itself stays its opener's."""

from __future__ import annotations

import asyncio

import sluice
from sluice.aio import AsyncDatabase, attach

__all__ = ["AsyncDb"]


class AsyncDb:
    """``await get()``: the app's AsyncDatabase, made once, on the running loop."""

    def __init__(self, db: sluice.Database) -> None:
        self._db = db
        self._made: AsyncDatabase | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> AsyncDatabase:
        if self._made is None:
            async with self._lock:
                if self._made is None:
                    self._made = await attach(self._db)
        return self._made

    async def close(self) -> None:
        made, self._made = self._made, None
        if made is not None:
            await made.close()
