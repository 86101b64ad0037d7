"""The raw baseline: a bare SQLite table, one index and three statements, no queue features.

It is what sluice's SQLite backend is measured against: the cost of the cycle with nothing but
the statements a queue cannot do without.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.cycle.matrix import observe
from bench.harness import chunks, encode, make_bodies

DRIVE = (
    "bare table `q(id INTEGER PRIMARY KEY, body BLOB, state INTEGER)` + index on `state`;"
    " INSERT; claim = `UPDATE q SET state=1 WHERE id IN (SELECT id FROM q WHERE state=0"
    " ORDER BY id LIMIT ?) RETURNING id, body`; ack = `DELETE FROM q WHERE id IN (...)`;"
    " sqlite3 in autocommit with explicit BEGIN IMMEDIATE/COMMIT; 3 transactions per cycle"
    " at batch 1, 3 per 100 cycles at batch 100."
)

_SCHEMA = (
    "CREATE TABLE q (id INTEGER PRIMARY KEY, body BLOB NOT NULL, state INTEGER NOT NULL)",
    # An index on state alone also orders by id: SQLite appends the rowid to every index key.
    "CREATE INDEX q_state ON q (state)",
)
_INSERT = "INSERT INTO q (body, state) VALUES (?, 0)"
_CLAIM = (
    "UPDATE q SET state = 1 WHERE id IN "
    "(SELECT id FROM q WHERE state = 0 ORDER BY id LIMIT ?) RETURNING id, body"
)


def connect(db_file: Path, synchronous: str) -> sqlite3.Connection:
    """A connection in WAL at ``synchronous`` that opens no transaction behind our back."""
    conn = sqlite3.connect(db_file, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


def drain(conn: sqlite3.Connection, table: str, claim: Callable[[], list[Any]]) -> int:
    """Claim in a transaction of its own, then acknowledge (delete from ``table``) in
    another, as a consumer does, until ``claim`` finds nothing; how many were taken.
    ``claim`` runs the claiming statement and returns its rows, each an id first."""
    got = 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        rows = claim()
        conn.execute("COMMIT")
        if not rows:
            return got
        ids = [row[0] for row in rows]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(f"DELETE FROM {table} WHERE id IN ({','.join('?' * len(ids))})", ids)
        conn.execute("COMMIT")
        got += len(ids)


def cycle(
    conn: sqlite3.Connection,
    *,
    name: str,
    table: str,
    n: int,
    batch: int,
    insert: str,
    rows: Callable[[Sequence[dict[str, object]]], list[tuple[Any, ...]]],
    claim: Callable[[], list[Any]],
) -> float:
    """The timed cycle of a raw contender: n bodies inserted ``batch`` per transaction (the
    parameters of a group's ``insert`` from ``rows``), then drained with ``claim``; checks
    that every message came back and none is left, records the durability used, and
    returns the seconds taken."""
    bodies = make_bodies(n)
    start = time.perf_counter()
    for group in chunks(bodies, batch):
        params = rows(group)
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(insert, params)
        conn.execute("COMMIT")
    got = drain(conn, table, claim)
    elapsed = time.perf_counter() - start
    left = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    if got != n or left:
        raise RuntimeError(f"{name}: claimed {got} of {n} messages, {left} rows left")
    observe(conn)
    return elapsed


def run(path: Path, n: int, batch: int, synchronous: str) -> float:
    """Enqueue n messages, then claim and acknowledge them all; return the seconds taken."""
    conn = connect(path / "raw.db", synchronous)
    try:
        for ddl in _SCHEMA:
            conn.execute(ddl)
        return cycle(
            conn,
            name="raw",
            table="q",
            n=n,
            batch=batch,
            insert=_INSERT,
            rows=lambda group: [(encode(b).encode(),) for b in group],
            claim=lambda: conn.execute(_CLAIM, (batch,)).fetchall(),
        )
    finally:
        conn.close()
