"""How a SQLite database is opened: durability level, lock waits, page cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sluice.errors import ConfigurationError

__all__ = ["SQLiteSettings", "Synchronous"]

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]


@dataclass(frozen=True, slots=True)
class SQLiteSettings:
    """How the SQLite file is opened.

    ``synchronous`` is SQLite's durability level for persistent queues (FULL:
    fsync at every commit). ``busy_timeout`` is how long a write waits for
    another process's lock before failing. ``cache_mib`` caps the page cache of
    the connection: a queue's backlog is read back soon after it was written
    (FIFO), so a cache smaller than the backlog turns claims into disk reads.
    ``group_commit`` lets commits from concurrent threads share one fsync.
    ``vfs`` names a SQLite VFS registered in this process to open the file through
    (None: SQLite's default); the power-cut tests use one that simulates a disk.
    """

    synchronous: Synchronous = "FULL"
    busy_timeout: float = 30.0
    cache_mib: int = 64
    group_commit: bool = True
    vfs: str | None = None

    def __post_init__(self) -> None:
        if self.synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigurationError(
                f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {self.synchronous!r}"
            )
        if self.busy_timeout < 0:
            raise ConfigurationError("busy_timeout must not be negative")
        if not isinstance(self.cache_mib, int) or self.cache_mib < 1:
            raise ConfigurationError(
                f"cache_mib must be a positive integer, not {self.cache_mib!r}"
            )
        if self.vfs is not None and not (isinstance(self.vfs, str) and self.vfs):
            raise ConfigurationError(f"vfs must name a SQLite VFS, not {self.vfs!r}")
