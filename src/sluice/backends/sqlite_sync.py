"""Acknowledgements at SQLite's FULL whose fsync does not hold the connection.

At ``synchronous=FULL`` SQLite syncs the WAL inside ``COMMIT``, while sluice's one
connection per backend (and the lock in front of it) waits: no other thread of the
process can claim or settle during an fsync. A plain acknowledgement (it deletes what its
transaction held, and nothing else: ``SQLiteBackend.commit``) is written at NORMAL
instead, where a WAL commit is appended in order and not synced, and once the connection
is free the committing thread syncs the WAL file itself: the ``fdatasync`` FULL makes at
the end of a commit, made by sluice (``WalSync.sync``). One sync covers every commit
written before it began, so the acknowledgements written meanwhile share it. (A commit
SQLite syncs at FULL after one would cover it too, but is not counted: a write that
changed nothing makes no WAL frame, and SQLite syncs nothing for it.) The acknowledgement
returns once a sync that began after it was written has ended: what returned is as
durable as at FULL.

A sync waits a moment before it begins (``GATHER``) when the one before it covered more
than one acknowledgement, as PostgreSQL's ``commit_delay`` does once ``commit_siblings``
others are active: threads are acknowledging side by side, and the ones that write
during the wait share this sync instead of each starting the next. A lone consumer's
syncs each cover one acknowledgement, so it never waits (at most once, after others
stopped).

Only acknowledgements: between the write and the sync, other connections see the
message gone, and a power cut there brings it back, to be delivered again, as after any
acknowledgement that did not return. New rows (enqueues, rejections into an error queue,
a lane's next message, freed credit) stay behind SQLite's own fsync: a consumer must
never take a message a power cut then unmakes (``bench outside-sync`` measured syncing
every commit outside, and why sluice does not).

Checkpoints need nothing more: at NORMAL SQLite syncs the WAL before each checkpoint and
the database file after it, and reuses the WAL only once a checkpoint has moved all of
it. Only for SQLite's default VFS, whose files are the named files on disk, or a VFS
that names how to sync one of its files (``register_sync``; the power-cut simulation's
does); with any other, and at ``EXTRA``, every commit syncs inside ``COMMIT``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from sluice.errors import StorageError

__all__ = ["GATHER", "WalSync", "register_sync", "wal_sync"]

GATHER = 0.0002
"""Seconds a sync waits for company (see the module's text). 200 µs: with 10 threads
acknowledging one message each on a 2-core machine, the consumers made 8-16% more
deliveries for 9-16% less CPU each (bench/results/topics-profile-2026-12-06-gather.md);
in a trial beforehand, 500 µs and 1 ms gained less."""

_SYNCS: dict[str, Callable[[str], None]] = {}
"""How to sync a file of a VFS other than the default, by the VFS's name."""


def register_sync(vfs: str, sync: Callable[[str], None] | None) -> None:
    """Let sluice sync the WAL of a database opened through ``vfs`` by calling
    ``sync(path)`` (the WAL file's path), as it does on the default VFS; None forgets
    it. For a VFS whose files are the named files, or that knows what syncing one means."""
    if sync is None:
        _SYNCS.pop(vfs, None)
    else:
        _SYNCS[vfs] = sync


def wal_sync(path: str, synchronous: str, vfs: str | None) -> WalSync | None:
    """The syncer of the database at ``path``, if its acknowledgements sync outside the
    connection (FULL, on the default VFS or one with ``register_sync``); else None."""
    if synchronous != "FULL":
        return None
    if vfs is None:
        return WalSync(path, None)
    sync = _SYNCS.get(vfs)
    return None if sync is None else WalSync(path, sync)


class WalSync:
    """Syncs the WAL of the database at ``path`` for its connection's acknowledgements.

    Acknowledgements are numbered under the connection's lock (``wrote``), after their
    write; ``_synced``: every one up to it is known on disk."""

    def __init__(
        self,
        path: str,
        sync: Callable[[str], None] | None,
        gather: float = GATHER,
        pause: Callable[[float], None] = time.sleep,
    ) -> None:
        self.path = f"{path}-wal"
        self._sync = sync
        self._gather = gather
        self._pause = pause
        self._lock = threading.Lock()  # one sync at a time; the others wait and share it
        self._written = 0
        self._synced = 0
        self._last_group = 0  # acknowledgements the last sync covered
        self._fd: int | None = None
        self.syncs = 0
        """Syncs made here (not SQLite's own)."""

    def wrote(self) -> int:
        """An acknowledgement was written unsynced (call under the connection's lock,
        after the write): its number."""
        self._written += 1
        return self._written

    def sync(self, upto: int) -> None:
        """Return once commit ``upto`` and all before it are on disk."""
        if self._synced >= upto:
            return
        with self._lock:
            if self._synced >= upto:  # a sync that began after it ended meanwhile
                return
            if self._gather and self._last_group > 1:
                self._pause(self._gather)  # others are acknowledging: let them write first
            covered = self._written  # every commit written before this sync begins
            self._last_group = covered - self._synced
            try:
                if self._sync is not None:
                    self._sync(self.path)
                else:
                    os.fdatasync(self._wal_fd())
            except OSError as exc:
                raise StorageError(
                    f"{self.path}: an acknowledgement was written but its fsync failed "
                    f"({exc}); it may not survive a power cut"
                ) from exc
            self.syncs += 1
            self._synced = covered

    def _wal_fd(self) -> int:
        """A descriptor of the WAL file, opened once: SQLite deletes it only when the
        database's last connection closes, and this one's stays open while it is used.
        (Closing a descriptor drops the process's POSIX locks on that file, which is why
        sqlite_file never opens the database file; SQLite locks the database and -shm
        files, never the WAL.)"""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        return self._fd

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
