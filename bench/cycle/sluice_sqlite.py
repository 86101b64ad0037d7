"""Drives sluice on its SQLite backend through the cycle, through its public API only.

Batch 1 uses the autocommit ``put``/``get``/``ack``; batch 100 uses ``put_many`` and explicit
transactions.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import sluice
from bench.cycle.matrix import observe_file
from bench.harness import chunks, make_bodies

DRIVE = (
    "`sluice.connect('sqlite:///...', synchronous=...)`; batch 1: `q.put(body)` N times, then"
    " `q.get()` + `m.ack()` until `get()` returns None (3 transactions per cycle); batch 100:"
    " `q.put_many(100 bodies)` (one transaction), then `tx.dequeue(limit=100)` in a"
    " `db.transaction()` (the claim is one SQLite transaction, the commit that acknowledges"
    " them another: 3 per 100 cycles, as raw)."
)

_QUEUE = "bench"

# sluice types its synchronous option as a Literal; the harness passes plain strings.
_LEVELS: dict[str, Literal["FULL", "NORMAL"]] = {"FULL": "FULL", "NORMAL": "NORMAL"}


def run(path: Path, n: int, batch: int, synchronous: str) -> float:
    """Enqueue n messages, then claim and acknowledge them all; return the seconds taken."""
    bodies = make_bodies(n)
    db_file = path / "sluice.db"
    db = sluice.connect(f"sqlite:///{db_file}", synchronous=_LEVELS[synchronous])
    try:
        db.create_queue(_QUEUE)
        got = 0
        start = time.perf_counter()
        if batch == 1:
            q = db.queue(_QUEUE)
            for body in bodies:
                q.put(body)
            while (m := q.get()) is not None:
                m.ack()
                got += 1
        else:
            q = db.queue(_QUEUE)
            for group in chunks(bodies, batch):
                q.put_many(group)
            while True:
                with db.transaction() as tx:
                    msgs = tx.dequeue(_QUEUE, limit=batch)
                if not msgs:
                    break
                got += len(msgs)
        elapsed = time.perf_counter() - start
        # Untimed check that every claim was also acknowledged, not merely leased.
        left = {k: v for k, v in db.queue(_QUEUE).stats().items() if v}
    finally:
        db.close()

    if got != n or left:
        raise RuntimeError(f"sluice: claimed {got} of {n} messages, left: {left}")
    # sluice's connection is not public: the journal mode is read back from the file, and
    # synchronous (a per-connection setting) can only be reported as requested.
    observe_file(db_file, synchronous, "synchronous as requested")
    return elapsed
