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

Nodes take turns through advisory locks taken with ``pg_try_advisory_xact_lock`` in the
transaction that does the work, so a lock ends with its transaction, whatever happens:
none is left on an idle connection, which a transaction-mode pooler would hand to
others while keeping the lock (the schema's maintenance stopped until the pooler
recycled the connection). VACUUM cannot run in a transaction: it runs after the one that
found it due, with SKIP_LOCKED so that a partition being vacuumed by another node, or
rotated, is skipped rather than waited for.

And the partitions' statistics are kept in step with their sizes. Every statement
runs a generic plan (postgres_pooler.SETTINGS), planned once per connection from the
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
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg.sql import SQL, Identifier

from sluice.backends.postgres_schema import LOCK_CLASS, quote_schema, schema_key
from sluice.backends.postgres_settings import PostgresSettings

__all__ = [
    "PARTITIONS",
    "Maintainer",
    "maintain",
    "maintenance_locks",
    "refresh_statistics",
    "rotate",
    "vacuum",
    "vacuum_due",
]

log = logging.getLogger("sluice.postgres")

PARTITIONS = 4
_VACUUM_THRESHOLD = 10_000  # dead rows before sluice vacuums for itself
_LOCK_TIMEOUT = "50ms"
_ANALYZE_MIN = 1_000  # rows in a partition before its first ANALYZE
_ANALYZE_GROWTH = 4  # live rows over the planner's belief that call for another


def maintain(
    conn: psycopg.Connection[Any],
    queries: Mapping[str, str],
    schema: str,
    settings: PostgresSettings,
    *,
    vacuum_too: bool,
) -> tuple[int | None, bool]:
    """One maintenance tick on ``conn`` (autocommit): rotate if due, analyze what the
    planner misjudges, vacuum if due and ``vacuum_too``. Returns (the partition made
    current or None, whether it vacuumed)."""
    rotation_lock, vacuum_lock = maintenance_locks(schema)
    rotated = rotate(
        conn,
        queries,
        schema,
        lock=rotation_lock,
        every=settings.rotate_every,
        max_move=settings.rotate_max_move,
    )
    # Every tick: one catalog read, an ANALYZE only when the planner is far off.
    due = vacuum_due(conn, queries, schema, lock=vacuum_lock, check=vacuum_too)
    if due:
        vacuum(conn, schema)
    return rotated, due


def _locked(conn: psycopg.Connection[Any], key: int) -> bool:
    """Whether this transaction got the advisory lock ``key`` (held until it ends)."""
    got = conn.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", (LOCK_CLASS, key)).fetchone()
    return bool(got and got[0])


def rotate(
    conn: psycopg.Connection[Any],
    queries: Mapping[str, str],
    schema: str,
    *,
    lock: int,
    every: int,
    max_move: int,
) -> int | None:
    """Rotate once if due and no other node holds ``lock``; the partition made current,
    or None if nothing was done.

    ``conn`` is an autocommit connection (from ``PostgresBackend._conn``, which rolls
    back on failure); the rotation is one transaction, which holds ``lock``.
    """
    quoted = quote_schema(schema)
    conn.execute("BEGIN")
    try:
        conn.execute(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT}'")
        if not _locked(conn, lock):
            conn.rollback()
            return None
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


def vacuum_due(
    conn: psycopg.Connection[Any],
    queries: Mapping[str, str],
    schema: str,
    *,
    lock: int,
    check: bool,
) -> bool:
    """In one transaction holding ``lock`` (skipped if another node holds it): refresh the
    partitions' statistics, and if ``check``, whether a vacuum is due."""
    conn.execute("BEGIN")
    if not _locked(conn, lock):
        conn.rollback()
        return False
    refresh_statistics(conn, queries, schema)
    due = check and _vacuum_wanted(conn, queries)
    conn.execute("COMMIT")
    return due


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


def _vacuum_wanted(conn: psycopg.Connection[Any], queries: Mapping[str, str]) -> bool:
    """Whether dead rows outnumber live ones, and enough of them to be worth a vacuum."""
    row = conn.execute(queries["dead_rows"]).fetchone()
    dead, live = row if row else (0, 0)
    return bool(dead >= _VACUUM_THRESHOLD and dead >= live)


def vacuum(conn: psycopg.Connection[Any], schema: str) -> None:
    """Vacuum the message partitions (outside any transaction)."""
    conn.execute(f"VACUUM (SKIP_LOCKED) {quote_schema(schema)}.messages")


class Maintainer:
    """A daemon thread: a rotation check every ``interval`` seconds, a vacuum check every tenth.

    Nodes take turns through advisory locks, without waiting for each other.
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
    rotation = -2 - 2 * schema_key(schema)
    return rotation, rotation - 1
