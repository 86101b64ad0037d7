"""Drives huey's ``SqliteStorage`` (the storage under ``SqliteHuey``) through the cycle.

huey's storage has no claim/ack: ``dequeue()`` selects and deletes the task in one transaction,
so a huey cycle is two transactions where the others need three.
"""

from __future__ import annotations

import time
from pathlib import Path

from huey.storage import SqliteStorage

from bench.cycle.matrix import Unsupported, observe
from bench.harness import encode, make_bodies

DRIVE = (
    "`huey.storage.SqliteStorage`: `enqueue(bytes)` N times, then `dequeue()` until None;"
    " dequeue is destructive (SELECT + DELETE in one `BEGIN EXCLUSIVE` transaction, after an"
    " unlocked existence check), so 2 transactions per cycle and no separate ack. Durability"
    " knob: `fsync=True` sets synchronous=2 (FULL), `fsync=False` sets 0 (OFF), the default"
    " `fsync=None` leaves SQLite's compiled default; NORMAL is not offered. journal_mode=wal"
    " by default."
)


def run(path: Path, n: int, batch: int, synchronous: str) -> float:
    """Enqueue n tasks, then dequeue until empty; return the seconds taken."""
    if batch != 1:
        raise Unsupported("huey's storage enqueues and dequeues one task per transaction")
    # fsync=True is huey's only way to ask for FULL; for NORMAL huey has no setting, so it
    # runs with its default (None: the SQLite library default) and the table says what that was.
    fsync = True if synchronous == "FULL" else None
    bodies = make_bodies(n)
    storage = SqliteStorage(name="bench", filename=str(path / "huey.db"), fsync=fsync)
    try:
        got = 0
        start = time.perf_counter()
        for body in bodies:
            storage.enqueue(encode(body).encode())
        while storage.dequeue() is not None:
            got += 1
        elapsed = time.perf_counter() - start

        left = storage.queue_size()
        if got != n or left:
            raise RuntimeError(f"huey: dequeued {got} of {n} tasks, {left} left")
        note = "" if synchronous == "FULL" else "NORMAL not offered; huey default fsync=None"
        observe(storage.conn, note)
        return elapsed
    finally:
        storage.close()
