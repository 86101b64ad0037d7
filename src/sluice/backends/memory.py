"""The in-memory backend: SQLite's in-memory engine, private to one process.

It runs the very same SQL as the file backend, so it behaves identically and
passes the same behaviour suite; it is meant for tests and for transient work
that need not outlive the process. Nothing survives ``close()``.
"""

from __future__ import annotations

from sluice.backends.sqlite import SQLiteBackend, SQLiteSettings
from sluice.clock import Clock

__all__ = ["MemoryBackend"]


class MemoryBackend(SQLiteBackend):
    """Queues held in this process's memory (see the module docstring)."""

    polled_for_changes = False

    def __init__(self, *, clock: Clock | None = None) -> None:
        # No file, so no fsync: FULL would only cost cycles without adding safety.
        super().__init__(":memory:", SQLiteSettings(synchronous="OFF"), clock=clock)

    def change_token(self) -> int:
        # No other connection can reach this database.
        return 0
