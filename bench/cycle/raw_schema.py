"""Raw SQLite on sluice's own table: the floor of sluice's schema, without sluice's Python.

The same three statements per batch as ``bench.cycle.raw_sqlite`` (its loop, ``cycle``),
run against the ``messages`` table and indexes sluice itself creates (a file made by
``sluice.connect``), writing the columns sluice writes and claiming in sluice's delivery
order (priority, then id; due and unexpired). What it costs above raw is what the schema
costs (the row's 31 columns and the five-column delivery index, the partial indexes); what
sluice costs above it is its Python.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sluice
from bench.cycle.raw_sqlite import connect, cycle
from bench.harness import encode

DRIVE = (
    "sluice's own `messages` table and indexes (made by `sluice.connect`), driven with raw"
    " statements: INSERT of the columns sluice writes; claim = `UPDATE messages SET state=2,"
    " c_session, c_tx WHERE id IN (SELECT id ... WHERE queue_id=? AND state=1 AND"
    " available_at<=? AND (expires_at IS NULL OR expires_at>?) ORDER BY priority DESC, id"
    " LIMIT ?) RETURNING` the columns a Message is built from; ack = `DELETE ... WHERE id IN"
    " (...)`; bodies JSON-encoded in, raw bytes out; 3 transactions per 100 cycles as raw."
)

INSERT = (
    "INSERT INTO messages (queue_id, state, priority, p_session, p_tx, p_num, body,"
    " content_type, properties, correlation_id, reply_to, enqueued_at, available_at,"
    " expires_at) VALUES (?, 1, 0, 1, ?, ?, ?, NULL, NULL, NULL, NULL, ?, ?, NULL)"
)
_MARK = "UPDATE messages SET state = 2, c_session = 1, c_tx = ? WHERE id IN ("
_PICK = (
    "SELECT id FROM messages WHERE queue_id = ? AND state = 1 AND available_at <= ?"
    " AND (expires_at IS NULL OR expires_at > ?) ORDER BY priority DESC, id LIMIT ?)"
)
# The columns sluice builds a Message from.
_RETURN_ALL = (
    " RETURNING id, state, priority, p_session, p_tx, p_num, body, content_type, properties,"
    " correlation_id, reply_to, enqueued_at, available_at, expires_at, attempts, error,"
    " origin_queue, type, grp"
)


@dataclass(frozen=True)
class Variant:
    """sluice's schema and claim, or one with some of its parts taken away (schema_cost).

    ``drop`` names indexes dropped after sluice made the file; ``index`` replaces the delivery
    index; ``expiry=False`` leaves the expiry test out of the claim; ``returning`` is the
    claim's RETURNING clause.
    """

    drop: tuple[str, ...] = ()
    index: str = ""
    expiry: bool = True
    returning: str = _RETURN_ALL

    def claim(self) -> str:
        pick = (
            _PICK
            if self.expiry
            else _PICK.replace("(expires_at IS NULL OR expires_at > ?)", "? IS NOT NULL")
        )
        return _MARK + pick + self.returning

    def shape(self, conn: sqlite3.Connection) -> None:
        for name in self.drop:
            conn.execute(f"DROP INDEX {name}")
        if self.index:
            conn.execute("DROP INDEX messages_queue")
            conn.execute(f"CREATE INDEX messages_queue ON messages {self.index}")


SLUICE = Variant()


def run(path: Path, n: int, batch: int, synchronous: str, variant: Variant = SLUICE) -> float:
    """Enqueue n messages, then claim and acknowledge them all; return the seconds taken."""
    claim = variant.claim()
    db_file = path / "schema.db"
    with sluice.connect(f"sqlite:///{db_file}") as db:
        db.create_queue("bench")
    conn = connect(db_file, synchronous)
    try:
        variant.shape(conn)
        (queue,) = conn.execute("SELECT id FROM queues WHERE name = 'bench'").fetchone()
        tx = 0

        def rows(group: Sequence[dict[str, object]]) -> list[tuple[Any, ...]]:
            nonlocal tx
            tx += 1
            now = time.time()
            return [(queue, tx, i, encode(b), now, now) for i, b in enumerate(group)]

        def take() -> list[Any]:
            nonlocal tx
            tx += 1
            now = time.time()
            return conn.execute(claim, (tx, queue, now, now, batch)).fetchall()

        return cycle(
            conn,
            name="raw-schema",
            table="messages",
            n=n,
            batch=batch,
            insert=INSERT,
            rows=rows,
            claim=take,
        )
    finally:
        conn.close()
