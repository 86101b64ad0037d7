"""Drives persist-queue's ``SQLiteAckQueue`` through the cycle: put, then get + ack until empty.

persist-queue exposes no synchronous setting, so it always runs with the SQLite library default.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import persistqueue
import persistqueue.serializers.json

from bench.cycle.matrix import Unsupported, observe
from bench.harness import make_bodies

DRIVE = (
    "`persistqueue.SQLiteAckQueue` (JSON serializer): `put(body)` N times, then"
    " `get(block=False, raw=True)` + `ack(item)` until `Empty`; 3 transactions per cycle (the"
    " claim's SELECT runs outside any transaction, then an UPDATE marks it unacked). `ack` only"
    " sets status=5: acked rows stay in the table unless `clear_acked_data()` is called, and"
    " the claim (`WHERE _id > 0 AND status < 2 ORDER BY _id`, no index on status) walks past"
    " every acked row, so its rate falls as acked rows pile up."
    " journal_mode=WAL is forced; no synchronous setting is offered; the ack queue refuses"
    " `auto_commit=False`, so there is no batching."
)


def run(path: Path, n: int, batch: int, synchronous: str) -> float:
    """Put n messages, then get and ack them all; return the seconds taken."""
    if batch != 1:
        raise Unsupported("SQLiteAckQueue has no batch API (it forces auto_commit=True)")
    bodies = make_bodies(n)
    q = persistqueue.SQLiteAckQueue(
        str(path / "pq"), serializer=persistqueue.serializers.json, auto_resume=False
    )
    try:
        got = 0
        start = time.perf_counter()
        for body in bodies:
            q.put(body)
        while True:
            try:
                item = q.get(block=False, raw=True)
            except persistqueue.Empty:
                break
            q.ack(item)
            got += 1
        elapsed = time.perf_counter() - start

        acked = q.acked_count()
        if got != n or acked != n:
            raise RuntimeError(f"persist-queue: got {got} of {n} messages, {acked} acked")
        # _putter is the queue's only connection when multithreading=False (the default);
        # it is read here only to report the durability the peer actually used.
        note = "" if synchronous == "FULL" else "no synchronous setting offered"
        conn = q._putter
        assert isinstance(conn, sqlite3.Connection)
        observe(conn, note)
        return elapsed
    finally:
        q.close()
