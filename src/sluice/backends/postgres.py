"""The PostgreSQL backend: the same queues, shared by any number of processes and hosts.

Every unit of work is one database transaction sent as one pipeline (BEGIN,
statements, COMMIT in a single round trip) on a pooled connection. Checks that
must undo a commit (a lease lost, a queue dropped) run inside the statements
through ``expect()``, so no second round trip is needed to decide.

- Claims use ``FOR UPDATE SKIP LOCKED``: concurrent consumers never wait on
  each other's rows. Only claims of a queue with ``max_in_flight`` wait, for
  the queue's credit lock, so that they count its claimed messages in turn.
- Delivery order is commit order: message ids come from one sequence, taken
  under an advisory lock per target queue that the transaction holds until it
  commits, so within a queue a message that commits later always has a higher
  id and a reader following ids never skips one.
- Durability: commits touching persistent queues use ``synchronous_commit``
  as the server has it; claims, releases, aborts, heartbeats and recovery,
  and commits touching only transient queues, commit without waiting for the
  WAL flush. A server crash that undoes one of those is caught like a lost
  lease: the holder's commit finds its rows changed and fails.
- Wake-ups: coalesced NOTIFY, with a fallback tick (``postgres_notify``).
- Behind a transaction-mode pooler (``pooler=transaction``) a connection keeps no
  session state: the planner settings go with each transaction instead of each
  connection, statements are not prepared, and LISTEN and maintenance use the
  ``direct`` URL (``postgres_pooler``).

This module holds the pool, the units of work and the queue operations; the claims
(``postgres_claims``), the appends and commits (``postgres_commits``), what the units decide
before and after their round trips (``postgres_decisions``, shared with sluice.aio), the
rules engine's dialect parts (``postgres_rules``) and Spark's streams (``postgres_streams``)
are mixed in.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sluice.backends.base import Backend
from sluice.backends.gateways import SqlGateways
from sluice.backends.group_commit import GroupCommitter
from sluice.backends.idempotency import SqlIdempotency
from sluice.backends.keys import SqlKeys
from sluice.backends.postgres_arrow import ArrowReader
from sluice.backends.records import (
    ConnectionLost,
    Lane,
    MessageRow,
    QueueCounts,
    Row,
    Selection,
    SessionInfo,
    browse_params,
)
from sluice.backends.sql_backend import (
    SqlBackend,
    SqlConnection,
    purge_statement,
    queue_counts,
    state_counts,
)
from sluice.backends.sqs import SqlSqs
from sluice.clock import Clock, OffsetClock
from sluice.errors import MissingDependency, StorageError
from sluice.expr.postgres import PostgresCompiler
from sluice.expr.sql import Source
from sluice.extras import install_hint

try:
    import psycopg
    import psycopg_pool
    from psycopg.pq import TransactionStatus
except ImportError as _missing:  # pragma: no cover - depends on the installation
    raise MissingDependency(
        f"the PostgreSQL backend needs psycopg 3 and its pool ({_missing}): "
        f"{install_hint('postgres')}"
    ) from _missing

from sluice.backends.postgres_claims import PostgresClaims
from sluice.backends.postgres_commits import PostgresCommits
from sluice.backends.postgres_maintenance import Maintainer, maintain
from sluice.backends.postgres_notify import Listener, Notifier, payload
from sluice.backends.postgres_outbox import PostgresOutbox
from sluice.backends.postgres_pooler import (
    DirectConnection,
    LoneConnection,
    begin,
    configure,
    statement,
    warn_undirected,
)
from sluice.backends.postgres_queries import load_queries
from sluice.backends.postgres_rules import PostgresRules
from sluice.backends.postgres_schema import LOCK_CLASS, migrate, quote_schema, recovery_lock
from sluice.backends.postgres_settings import PostgresSettings, libpq_seconds
from sluice.backends.postgres_statements import (
    fetched,
    first,
    fronts,
    lane_front_statements,
    lanes_params,
    message_rows,
    no_connection,
    offset_between,
    release_statements,
    server_offset,
    translate,
)
from sluice.backends.postgres_streams import PostgresStreams
from sluice.backends.postgres_topics import PostgresTopics

__all__ = ["PostgresBackend", "PostgresSettings"]

_PEER_MEMORY = 60.0  # seconds a notification from another Database counts as a peer
_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)  # ~6 s: a server restart's worth


class PostgresBackend(
    SqlBackend,
    PostgresCommits,
    PostgresClaims,
    PostgresStreams,
    PostgresTopics,
    PostgresRules,
    SqlKeys,
    SqlIdempotency,
    SqlSqs,
    SqlGateways,
    Backend,
):
    """Queue storage in a PostgreSQL schema (see the module docstring)."""

    dialect = "postgresql"
    polled_for_changes = False  # other processes' news arrives by LISTEN (on_change)

    def __init__(
        self, conninfo: str, settings: PostgresSettings | None = None, *, clock: Clock | None = None
    ) -> None:
        self.settings = settings or PostgresSettings()
        self.conninfo = conninfo
        self.schema = self.settings.schema
        self._schema_sql = quote_schema(self.schema)
        self._q, self._templates = load_queries(self.schema)
        self._selections: dict[str, tuple[str, dict[str, Any]]] = {}
        self.channel = f"sluice_{self.schema}"
        self.outbox = PostgresOutbox(self)
        self._kwargs: dict[str, Any] = {
            "connect_timeout": libpq_seconds(self.settings.connect_timeout),
            "prepare_threshold": self.settings.prepare_after,
        }
        if "application_name" not in conninfo:  # so operators can tell sluice's sessions apart
            self._kwargs["application_name"] = "sluice"
        self._uncertain: set[tuple[int, int]] = set()
        self._group = GroupCommitter(self.commit_many) if self.settings.group_commit else None
        self._due = threading.local()  # see _keep_due
        self._peer_heard = float("-inf")
        self._listener: Listener | None = None
        self._arrow: ArrowReader | None = None  # Spark's reads in columns, when first made
        self._keeping_up: set[str] = set()  # PostgresTopics.pull
        self._closed = False
        self._pooled = self.settings.pooler is not None  # no session state (postgres_pooler)
        try:
            with psycopg.connect(conninfo, autocommit=True, **self._kwargs) as conn:
                migrate(conn, self.schema, upgrade=self.settings.migrate)
                # Message times by the server's clock, whichever host reads it: so hosts
                # whose clocks disagree still agree on when a message is due.
                self.server_time = OffsetClock(server_offset(conn, self._q["server_time"]))
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to PostgreSQL: {exc}") from exc
        self.clock: Clock = clock or self.server_time
        self._pool: psycopg_pool.ConnectionPool[LoneConnection] = psycopg_pool.ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max(1, self.settings.pool_size),
            kwargs={"autocommit": True, **self._kwargs},
            open=False,
            name=f"sluice-{os.getpid()}",
            timeout=self.settings.connect_timeout,
            reconnect_timeout=0,
            configure=None if self._pooled else configure,
            connection_class=LoneConnection,
        )
        try:
            self._pool.open(wait=True, timeout=self.settings.connect_timeout)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StorageError(f"cannot connect to PostgreSQL at {conninfo!r}: {exc}") from exc
        self._notifier = Notifier(
            conninfo, self._kwargs, self.channel, self.settings.notify_interval
        )
        # Maintenance's own connection when there is a direct URL; else a pooled one (its
        # locks are transaction-scoped, so a pooler may share it).
        self._direct = (
            DirectConnection(self.settings.direct, self._kwargs) if self.settings.direct else None
        )
        if self._pooled and self._direct is None:
            warn_undirected(conninfo, self.settings.fallback)
        self._maintainer = (
            Maintainer(
                lambda vacuum_too: self.maintain(vacuum_too=vacuum_too),
                self.settings.maintenance_interval,
            )
            if self.settings.maintenance_interval > 0
            else None
        )

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        """What every connection of this backend is opened with, beside ``conninfo``."""
        return dict(self._kwargs)

    # --- connections and units of work ---------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._maintainer is not None:
            self._maintainer.close()
        if self._listener is not None:
            self._listener.close()
        self._notifier.close()
        if self._direct is not None:
            self._direct.close()
        if self._arrow is not None:
            self._arrow.close()
        self._pool.close()

    def _arrow_reader(self) -> ArrowReader:
        if self._arrow is None:
            # The pool's connect timeout and name too (a URL or key=value conninfo alike).
            named = {k: str(v) for k, v in self._kwargs.items() if k != "prepare_threshold"}
            self._arrow = ArrowReader(psycopg.conninfo.make_conninfo(self.conninfo, **named))
        return self._arrow

    def on_change(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(queue)`` when another process may have made messages available."""
        if self._listener is None:
            # Behind a pooler, LISTEN only on a direct URL (a pooled one would lose it);
            # without one, the listener only ticks every ``fallback`` seconds.
            self._listener = Listener(
                self.settings.direct if self._pooled else self.conninfo,
                self._kwargs,
                self.channel,
                callback,
                fallback=self.settings.fallback,
                origin=self._notifier.origin,
                on_peer=self._peer_seen,
            )

    def _peer_seen(self) -> None:
        self._peer_heard = time.monotonic()
        self._notifier.peers = True

    @contextmanager
    def _conn(self) -> Iterator[LoneConnection]:
        """A pooled connection; whatever fails on it leaves no transaction open.

        Driver errors become StorageError (``expect()`` failures the sluice error
        they stand for); a broken connection is discarded by the pool.
        """
        if self._closed:
            raise StorageError("the database connection is closed; call sluice.connect again")
        try:
            with self._pool.connection() as conn:
                try:
                    yield conn
                except BaseException as exc:
                    _rollback(conn)
                    if isinstance(exc, psycopg.Error):
                        raise translate(exc) from exc
                    raise
        except psycopg_pool.PoolTimeout as exc:
            raise no_connection(self._pool, exc) from exc

    def _unit(
        self, statements: Sequence[tuple[str, Any]], *, durable: bool = True
    ) -> list[list[Row]]:
        """Run statements as one transaction in one round trip; the rows of each."""
        with self._conn() as conn:
            cursors = []
            with conn.pipeline():
                begin(conn, durable=durable, pooled=self._pooled)
                for name, params in statements:
                    cursors.append(conn.execute(self._q[name], params))
                conn.execute("COMMIT")
            return [fetched(cur) for cur in cursors]

    def _one(self, name: str, params: Any, *, durable: bool = True) -> list[Row]:
        """One statement as its own transaction; durable ones need no BEGIN/COMMIT."""
        if not durable:
            return self._unit([(name, params)], durable=False)[0]
        with self._conn() as conn:
            cur = statement(conn, self._q[name], params, pooled=self._pooled)
            return fetched(cur)

    def _retrying(self, work: Callable[[], Any]) -> Any:
        """Run idempotent work, retrying while the server is unreachable (a restart).

        The retries cover a restart's few seconds, not more: an attempt may itself wait
        out the pool's timeout, and eight of those made closing a Database whose server
        had gone take 86 s.
        """
        give_up = time.monotonic() + sum(_RETRY_DELAYS)
        for delay in (*_RETRY_DELAYS, None):
            try:
                return work()
            except StorageError as exc:
                if delay is None or not isinstance(exc, ConnectionLost):
                    raise
                if self._closed or time.monotonic() + delay > give_up:
                    raise
                time.sleep(delay)
        raise AssertionError("unreachable")

    # --- sessions and recovery -------------------------------------------------------
    def open_session(self, host: str, pid: int, lease: float) -> int:
        rows = self._retrying(
            lambda: self._one("open_session", {"host": host, "pid": pid, "lease": lease})
        )
        return int(rows[0][0])

    def heartbeat(self, session: int) -> bool:
        # Not durable: a heartbeat lost to a server crash matters to nobody.
        before = time.time()
        rows = self._one("heartbeat", {"session": session}, durable=False)
        if rows:  # follows this host's clock drifting from the server's
            self.server_time.offset = offset_between(float(rows[0][1]), before, time.time())
        return bool(rows)

    @contextmanager
    def _transaction(self, *, durable: bool = True) -> Iterator[psycopg.Connection[Any]]:
        """A transaction over several round trips, for the rare paths that must decide."""
        with self._conn() as conn:
            begin(conn, durable=durable, pooled=self._pooled)
            yield conn
            conn.execute("COMMIT")

    def recover(self, is_dead: Callable[[SessionInfo], bool], *, wait: bool = True) -> list[int]:
        def work() -> list[int]:
            with self._transaction(durable=False) as conn:
                # A process stopped inside this transaction (SIGSTOP, a frozen VM) would
                # hold the schema's recovery lock, and with it everyone's recovery there,
                # for as long as it is stopped: the server ends its connection after a few
                # idle seconds.
                conn.execute(self._q["recovery_idle_limit"])
                key = {"lock_class": LOCK_CLASS, "key": recovery_lock(self.schema)}
                if wait:
                    conn.execute(self._q["recovery_lock"], key)
                elif not first(conn.execute(self._q["try_recovery_lock"], key).fetchall()):
                    return []  # another node is recovering right now
                # Leases on real time (sluice.engine.lease), not self.clock.
                rows = conn.execute(self._q["list_sessions"], {"now": time.time()}).fetchall()
                # Alone in the schema (and nobody heard lately, for a newcomer may say
                # hello before its session is registered): no one to notify.
                recent = time.monotonic() - self._peer_heard < _PEER_MEMORY
                self._notifier.peers = len(rows) > 1 or recent
                dead = [s.id for s in (SessionInfo(*r) for r in rows) if is_dead(s)]
                for session in dead:
                    conn.execute(self._q["close_session"], {"session": session})
                self._roll_back_orphans(conn)
                conn.execute(self._q["expire"], {"now": self.clock.now()})
                return dead

        dead: list[int] = self._retrying(work)
        if dead:
            self._notifier.signal()
        return dead

    def maintain(self, *, vacuum_too: bool = True) -> tuple[int | None, bool]:
        """Rotate the message partitions if due, analyze those the planner believes far
        smaller than they are, and vacuum them if needed.

        Returns (the partition made current or None, whether it vacuumed); see
        ``postgres_maintenance``. One node at a time; the others skip.
        """
        with self._maintenance_conn() as conn:
            return maintain(conn, self._q, self.schema, self.settings, vacuum_too=vacuum_too)

    @contextmanager
    def _maintenance_conn(self) -> Iterator[psycopg.Connection[Any]]:
        if self._direct is None:
            with self._conn() as conn:
                yield conn
            return
        try:
            with self._direct.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise translate(exc) from exc

    # --- what SqlBackend asks of a dialect -----------------------------------------------
    @property
    def statements(self) -> Mapping[str, str]:
        """The named statements, ready to run (the outbox runs them on a caller's connection)."""
        return self._q

    def _read_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        # One statement, no BEGIN/COMMIT: a read needs no durability setting.
        rows: list[Row] = self._retrying(lambda: self._one(name, params))
        return rows

    def _write_rows(self, name: str, params: Mapping[str, Any], *, durable: bool = True) -> int:
        if not durable:
            with self._transaction(durable=False) as conn:
                return int(conn.execute(self._q[name], params).rowcount)
        with self._conn() as conn:
            return int(statement(conn, self._q[name], params, pooled=self._pooled).rowcount)

    def _promote(self, conn: SqlConnection, lanes: Sequence[Lane]) -> None:
        conn.execute(self._q["promote"], lanes_params(lanes))

    def _release_orphans(self, conn: SqlConnection) -> list[Lane]:
        # Each statement runs on a snapshot of its own: a claim a recovered session
        # commits between a read of the lanes and the release would be released with
        # its lane unnamed (no head, for ever). The releasing statements name theirs.
        for name in ("dead_sessions_pending", "dead_sessions_own_claims"):
            conn.execute(self._q[name])
        lanes = set(conn.execute(self._q["dead_sessions_dead_letter"]).fetchall())
        lanes.update(conn.execute(self._q["dead_sessions_release"]).fetchall())
        return sorted(lanes)

    def _drop_stream_rows(self, conn: SqlConnection, session: int) -> None:
        conn.execute(self._q["stream_spool_drop"], {"session": session})

    def _close_sessions(self, name: str, params: Mapping[str, Any]) -> None:
        # Retried through a server restart: closing is idempotent.
        self._retrying(lambda: SqlBackend._close_sessions(self, name, params))

    def _sessions_closed(self) -> None:
        self._notifier.signal()

    def expression_compiler(self, alias: str = "m") -> PostgresCompiler:
        """A compiler of expressions for this schema's SQL."""
        return PostgresCompiler(Source(alias=alias), schema=self._schema_sql)

    def _compiler(self, source: Source, prefix: str) -> PostgresCompiler:
        return PostgresCompiler(source, schema=self._schema_sql, prefix=prefix)

    def _selection(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]:
        found, params = self.selected(name, select)
        return self._q[found], params

    def _made_available(self, queues: set[str]) -> None:
        # Sent now, not by the coalescing Notifier: resumes and retries are rare, and the
        # process that made them (a CLI command) may end before that thread's turn.
        note = payload(self._notifier.origin, queues)
        self._write_rows("notify", {"channel": self.channel, "payload": note}, durable=False)

    # --- messages --------------------------------------------------------------------
    def lane_fronts(self, queue: str, lanes: Sequence[str]) -> dict[str, tuple[int, int]]:
        return fronts(lanes, self._unit(lane_front_statements(queue, lanes), durable=False))

    def release(
        self, session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None:
        self._unit(release_statements(session, tx, refs, lanes), durable=False)
        self.released()

    def abort(self, session: int, tx: int, held: Sequence[int], lanes: Sequence[Lane] = ()) -> None:
        # Idempotent, so it is retried through a server restart: an abort that
        # failed would leave claims behind until the session ends.
        statements = self.abort_unit(session, tx, held, lanes)
        self._retrying(lambda: self._unit(statements, durable=False))
        self.aborted(session, tx, held)

    def browse(
        self,
        queue: str,
        state: str,
        limit: int,
        session: int,
        tx: int,
        *,
        select: Selection | None = None,
        after: tuple[int, int] | None = None,
    ) -> list[MessageRow]:
        # Done messages have a statement of their own: they browse in settle order.
        name, extra = self.selected("browse_done" if state == "done" else "browse", select)
        params = (
            browse_params(queue, state, limit, session, tx, now=self.clock.now(), after=after)
            | extra
        )
        return message_rows(self._one(name, params))

    def purge(self, queue: str, state: str, before: float) -> int:
        statement, params = purge_statement(self._q, queue, state, before)
        with self._transaction() as conn:
            if state == "ready":  # before expiry's lane locks: publishes take them so too
                conn.execute(self._q["purge_lock"], {"lock_class": LOCK_CLASS, "queue": queue})
            conn.execute(self._q["expire"], {"now": self.clock.now()})
            return conn.execute(statement, params).rowcount

    def stats(self, queue: str) -> dict[str, int]:
        now = self.clock.now()
        _, rows = self._unit(
            [("expire", {"now": now}), ("stats", {"queue": queue, "now": now})], durable=False
        )
        return state_counts(rows)

    def stats_all(self) -> dict[str, QueueCounts]:
        now = self.clock.now()
        _, rows = self._unit(
            [("expire", {"now": now}), ("queue_gauges", {"now": now})], durable=False
        )
        return queue_counts(rows)

    def remove_kept(self, limit: int) -> int:
        params = {"now": self.clock.now(), "limit": limit}
        return int(first(self._one("remove_kept", params, durable=False)))

    def waiting(self, wanted: bool) -> None:
        """Nothing: LISTEN goes on either way (its notifications cost nothing unread)."""

    def change_token(self) -> int:
        # Never polled (polled_for_changes is False): news arrives through on_change.
        return 0


def _rollback(conn: psycopg.Connection[Any]) -> None:
    if conn.closed:
        return
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        try:
            # Not conn.execute("ROLLBACK"): once psycopg prepares that text, its result
            # empties psycopg's cache of prepared statements and queues a DEALLOCATE ALL,
            # which a later pipeline sent between a statement's Parse and its Bind:
            # "prepared statement ... does not exist" (a worker racing on schedules hit it).
            conn.rollback()
        except psycopg.Error:
            conn.close()  # the pool discards it
