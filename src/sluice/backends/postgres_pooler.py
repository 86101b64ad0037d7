"""What a PostgreSQL connection keeps, and where it keeps it: per connection when the
connection is sluice's own, per transaction behind a transaction-mode pooler.

sluice runs every statement with three planner settings (``SETTINGS``). On its own
connections they are set once per connection (``configure``). A transaction-mode
pooler (PgBouncer, Supavisor...) hands each transaction whichever server connection
is free, so a session ``SET`` would land on a connection other clients then get, and
be missing from the one sluice gets next: there they go with each transaction
instead, in one statement after BEGIN (``begin``), or in front of a lone statement in
the same pipeline, hence the same implicit transaction (``statement``). Either costs no
round trip. A database or role that has them already (``ALTER ROLE ... SET``) can be
spared even that: docs/postgresql.md, "Behind a pooler".

LISTEN and session advisory locks do not survive a pooler either: the listener and
maintenance use ``DirectConnection``'s URL, which bypasses it, and without one the
listener only ticks (``warn_undirected`` says so, once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, LiteralString

import psycopg

from sluice.urls import shown_url

__all__ = [
    "LOCAL",
    "LOCAL_RELAXED",
    "SETTINGS",
    "DirectConnection",
    "LoneConnection",
    "begin",
    "configure",
    "statement",
    "warn_undirected",
]

log = logging.getLogger("sluice.postgres")

SETTINGS = (
    # Every statement is prepared, and a generic plan suits all of them (they find rows
    # through one queue's index whatever the parameters): without this the server would
    # plan each execution anew, which costs more than executing a claim.
    ("plan_cache_mode", "force_generic_plan"),
    # Nor JIT: on a queue of a million messages with statistics, a claim's estimated cost
    # (its never-run "when is the next one due" branch) passes jit_above_cost, and
    # compiling it took 80 ms where running it takes 0.3 ms.
    ("jit", "off"),
    # Nor sequential scans where an index serves (a table without one still gets its
    # scan): a generic plan is made once, from the statistics of the time, and the
    # partition new messages go to grows under it. Planned while it held a few hundred
    # rows, `id = ANY(...)` scanned it whole, and went on doing so at 50,000 rows, 30 ms a
    # batch of rules instead of 1; the index path costs the same at any size.
    # postgres_maintenance.refresh_statistics keeps the partition's statistics in step, so
    # the planner also picks the right index.
    ("enable_seqscan", "off"),
)
"""The planner settings of every sluice statement, and why."""

LOCAL: LiteralString = "SELECT " + ", ".join(
    f"set_config('{name}', '{value}', true)" for name, value in SETTINGS
)
"""``SETTINGS`` for the current transaction only: what a pooled connection runs after BEGIN."""
# A commit that need not wait for the WAL flush (claims, releases, heartbeats...).
LOCAL_RELAXED: LiteralString = LOCAL + ", set_config('synchronous_commit', 'off', true)"


def configure(conn: psycopg.Connection[Any]) -> None:
    """Set ``SETTINGS`` for the session: on a connection that is sluice's alone."""
    for name, value in SETTINGS:
        conn.execute("SELECT set_config(%s, %s, false)", (name, value))


def begin(conn: psycopg.Connection[Any], *, durable: bool, pooled: bool) -> None:
    """BEGIN a transaction (in a pipeline or not), with the settings a pooled connection
    lacks; ``durable=False`` commits without waiting for the WAL flush."""
    conn.execute("BEGIN")
    if pooled:
        conn.execute(LOCAL if durable else LOCAL_RELAXED)
    elif not durable:
        conn.execute("SET LOCAL synchronous_commit TO off")


class LoneConnection(psycopg.Connection[Any]):
    """The pool's connections: each keeps one cursor for the statements sent alone.

    A new cursor per statement (``conn.execute``) set up its adapters map and
    transformer every time, a third of a lone statement's Python. The cursor lives
    on its connection (a weak map keyed by the connection could not drop it: the
    cursor refers to its connection) and goes with it when the pool lets it go.
    """

    _lone: psycopg.Cursor[Any] | None = None

    def lone_cursor(self) -> psycopg.Cursor[Any]:
        cur = self._lone
        if cur is None or cur.closed:
            cur = self._lone = self.cursor()
        return cur


def statement(
    conn: LoneConnection, query: str, params: Any, *, pooled: bool
) -> psycopg.Cursor[Any]:
    """Run one statement as its own transaction, on a pooled connection with the settings
    in front of it: a pipeline without a Sync between is one implicit transaction."""
    if not pooled:
        return conn.lone_cursor().execute(query, params)
    with conn.pipeline():
        conn.execute(LOCAL)
        return conn.execute(query, params)


class DirectConnection:
    """One autocommit connection to the ``direct`` URL, opened when first needed and again
    after it failed; for maintenance, one user at a time."""

    def __init__(self, url: str, kwargs: dict[str, Any]) -> None:
        self.url = url
        self._kwargs = kwargs
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """The connection, with ``SETTINGS``; closed if what ran on it failed."""
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.url, autocommit=True, **self._kwargs)
                configure(self._conn)
            try:
                yield self._conn
            except BaseException:
                self._conn.close()  # whatever state it was left in goes with it
                self._conn = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_undirected(conninfo: str, fallback: float) -> None:
    """Say once per URL that, behind a pooler with no direct URL, no LISTEN is possible."""
    shown = shown_url(conninfo)
    with _warned_lock:
        if shown in _warned:
            return
        _warned.add(shown)
    log.warning(
        "sluice: %s goes through a pooler (pooler=transaction) and no direct= URL is given: "
        "wake-ups from other processes arrive only with the fallback check, every %s s. "
        "Give direct=postgresql://... (the same database without the pooler) for LISTEN "
        "and maintenance, or lower fallback=",
        shown,
        fallback,
    )
