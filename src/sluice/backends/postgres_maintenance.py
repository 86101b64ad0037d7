"""Keeping the PostgreSQL queue table fast under churn: rotation, and vacuum where needed.

Every acknowledged message leaves a dead row, and claims walk the dead index
entries of their queue until they are cleaned up. VACUUM cleans them, but not
while a long transaction anywhere in the database is open: then claims slow
from milliseconds to hundreds of milliseconds, and the backlog grows
(bench/soak/ measures it).

So messages live in four partitions used in turn. Every ``rotate_every``
messages, one node (whichever gets the lock) takes the oldest partition, moves
its few remaining live rows (slow consumers, delayed or kept messages) to the
current one, TRUNCATEs it and makes it current. TRUNCATE frees dead rows
whatever other transactions are open. It needs the partition to itself for a
moment: it waits at most ``lock_timeout`` for statements in flight and tries
again later if a transaction keeps the table locked. A partition holding more
than ``max_move`` live rows (a backlog) is not rotated until it drains.

A vacuum check runs too, for databases whose autovacuum is off or lags.

And the partitions' statistics are kept in step with their sizes. Every statement
runs a generic plan (postgres._configure), planned once per connection from the
statistics of the time: a partition made current after its TRUNCATE has none, so the
planner takes it for empty and scans it whole (along the wrong index) to find rows by
id, a plan kept until the statistics change. Autovacuum analyzes a table after a minute
or more; meanwhile the current partition fills, and a backlog loaded into several
partitions keeps them unanalyzed (the rules routing bench: 50,000 rows scanned for each
batch of 256, 250 ms instead of 10; a batch of 25,000 on a fresh backlog, 18 s instead
of 1). So a partition is analyzed here as soon as it holds ``_ANALYZE_MIN`` rows and
whenever it has grown ``_ANALYZE_GROWTH`` times past what the planner believes; ANALYZE
invalidates the plans, and every connection plans again, once.
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg.sql import SQL, Identifier

from sluice.backends.postgres_schema import LOCK_CLASS, quote_schema

__all__ = [
    "PARTITIONS",
    "Maintainer",
    "maintenance_locks",
    "refresh_statistics",
    "rotate",
    "vacuum",
    "with_lock",
]

log = logging.getLogger("sluice.postgres")

PARTITIONS = 4
_VACUUM_THRESHOLD = 10_000  # dead rows before sluice vacuums for itself
_LOCK_TIMEOUT = "50ms"
_ANALYZE_MIN = 1_000  # rows in a partition before its first ANALYZE
_ANALYZE_GROWTH = 4  # live rows over the planner's belief that call for another


def rotate(
    conn: psycopg.Connection[Any],
    queries: Mapping[str, str],
    schema: str,
    *,
    every: int,
    max_move: int,
) -> int | None:
    """Rotate once if due; the partition made current, or None if nothing was done.

    ``conn`` is an autocommit connection (from ``PostgresBackend._conn``, which rolls
    back on failure); the rotation is one transaction.
    """
    quoted = quote_schema(schema)
    conn.execute("BEGIN")
    try:
        conn.execute(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT}'")
        row = conn.execute(queries["rotation_due"]).fetchone()
        slot, ids_since = row if row is not None else (0, 0)  # ids given since the last one
        if row is None or ids_since < every:
            conn.rollback()
            return None
        current, oldest = int(slot), (int(slot) + 1) % PARTITIONS
        target = f"{quoted}.messages_{oldest}"
        conn.execute(f"LOCK TABLE {target} IN ACCESS EXCLUSIVE MODE")
        live = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {target} LIMIT %s) AS r", (max_move + 1,)
        ).fetchone()
        if live is None or live[0] > max_move:
            conn.rollback()  # a backlog: rotate once it has drained
            return None
        # The survivors keep their ids, hence their places in the queues.
        conn.execute(
            f"INSERT INTO {quoted}.messages SELECT id, %s, {_OTHER_COLUMNS} FROM {target}",
            (current,),
        )
        conn.execute(f"TRUNCATE {target}")
        conn.execute(queries["rotation_done"], {"slot": oldest})
        conn.execute("COMMIT")
        return oldest
    except psycopg.errors.LockNotAvailable:
        conn.rollback()
        return None
    # Any other failure: the caller's connection guard rolls back.


_OTHER_COLUMNS = (
    "queue_id, state, priority, p_session, p_tx, p_num, c_session, c_tx, body, body_bytes, "
    "content_type, properties, correlation_id, reply_to, enqueued_at, available_at, "
    "expires_at, attempts, error, origin_queue, type, t1, t2, t3, t4, n1, n2, n3, n4, grp, lane, "
    "ref, settled_at"
)


def refresh_statistics(
    conn: psycopg.Connection[Any], queries: Mapping[str, str], schema: str
) -> bool:
    """ANALYZE the partitions the planner believes far smaller than they are; True if it
    analyzed any (see the module's docstring)."""
    stale = [
        str(name)
        for name, live, believed in conn.execute(queries["partition_statistics"]).fetchall()
        if live >= _ANALYZE_MIN and max(float(believed), 0.0) * _ANALYZE_GROWTH <= live
    ]
    for name in stale:
        conn.execute(SQL("ANALYZE {}.{}").format(Identifier(schema), Identifier(name)))
    return bool(stale)


def vacuum(conn: psycopg.Connection[Any], queries: Mapping[str, str], schema: str) -> bool:
    """Vacuum the message partitions if dead rows outnumber live ones; True if it did."""
    row = conn.execute(queries["dead_rows"]).fetchone()
    dead, live = row if row else (0, 0)
    if dead < _VACUUM_THRESHOLD or dead < live:
        return False
    conn.execute(f"VACUUM {quote_schema(schema)}.messages")
    return True


class Maintainer:
    """A daemon thread: a rotation check every ``interval`` seconds, a vacuum check every tenth.

    Nodes take turns through an advisory lock, without waiting for each other.
    """

    def __init__(self, maintain: Callable[[bool], object], interval: float) -> None:
        self._maintain = maintain  # the backend's: (vacuum too?) -> whatever it did
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sluice-maintain", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        ticks = 0
        while not self._stop.wait(self._interval):
            ticks += 1
            try:
                self._maintain(ticks % 10 == 0)
            except Exception as exc:  # the database may be restarting: try again later
                log.debug("sluice maintenance skipped: %s", exc)


def maintenance_locks(schema: str) -> tuple[int, int]:
    """The (rotation, vacuum) advisory lock keys of a schema's maintenance.

    Negative, apart from the queues' keys (their ids) and the migrations' (-1);
    per schema, since each schema rotates its own partitions: nodes of other
    schemas in the database need not take turns with this one.
    """
    rotation = -2 - 2 * (zlib.crc32(schema.encode()) & 0x3FFFFFF)
    return rotation, rotation - 1


def with_lock(conn: psycopg.Connection[Any], key: int, work: Callable[[], Any]) -> Any:
    """Run ``work`` if this session gets the advisory lock ``key``; None otherwise."""
    got = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, key)).fetchone()
    if not got or not got[0]:
        return None
    try:
        return work()
    finally:
        # A session lock outlives a rollback: if ``work`` failed inside its
        # transaction, end that first, or the unlock fails and the pooled
        # connection keeps the lock for good.
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, key))
