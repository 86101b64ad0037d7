"""The PostgreSQL backend: the same queues, shared by any number of processes and hosts.

Every unit of work is one database transaction sent as one pipeline (BEGIN,
statements, COMMIT in a single round trip) on a pooled connection. Checks that
must undo a commit (a lease lost, a queue dropped) run inside the statements
through ``expect()``, so no second round trip is needed to decide.

- Claims use ``FOR UPDATE SKIP LOCKED``: concurrent consumers never wait on
  each other's rows.
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
"""

from __future__ import annotations

import base64
import os
import select
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sluice import sql
from sluice.backends.base import (
    MESSAGE_COLUMNS,
    SLOTS,
    STREAM_LEASE,
    CommitPlan,
    Effect,
    Envelope,
    Lane,
    PropertyDef,
    Row,
    Selection,
    SessionInfo,
    StagedPart,
    StreamState,
    TxBackend,
    Unchanged,
    browse_params,
    isolation_in_use,
    queue_in_use,
    run_steps,
    sink_host,
    sink_seen,
    stream_host,
)
from sluice.backends.selection import compile_selection
from sluice.catalog import QueueSpec, spec_from_row, spec_params
from sluice.errors import (
    ConfigurationError,
    Conflict,
    InvalidBody,
    LeaseLost,
    QueueExists,
    QueueNotFound,
    SluiceError,
    StorageError,
)
from sluice.expr.postgres import PostgresCompiler
from sluice.expr.sql import Source
from sluice.message import encode_json

try:
    import psycopg
    import psycopg_pool
    from psycopg import errors as pg_errors
    from psycopg.pq import TransactionStatus
except ImportError as _missing:  # pragma: no cover - depends on the installation
    raise ConfigurationError(
        "the PostgreSQL backend needs psycopg 3 and its pool: pip install 'sluice[postgres]'"
    ) from _missing

from sluice.backends.postgres_maintenance import (
    Maintainer,
    maintenance_locks,
    rotate,
    vacuum,
    with_lock,
)
from sluice.backends.postgres_notify import Listener, Notifier, payload
from sluice.backends.postgres_schema import LOCK_CLASS, MESSAGES_TABLE, migrate, quote_schema

if TYPE_CHECKING:
    import pyarrow as pa  # sluice[spark]

__all__ = ["PostgresBackend", "PostgresSettings"]

_STATE_NAMES = {0: "pending", 1: "ready", 2: "claimed", 3: "expired", 4: "failed", 5: "ready"}
_PEER_MEMORY = 60.0  # seconds a notification from another Database counts as a peer
_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)  # ~6 s: a server restart's worth


@dataclass(frozen=True, slots=True)
class PostgresSettings:
    """Options of a PostgreSQL connection (see ``sluice.connect``)."""

    schema: str = "sluice"
    pool_size: int = 10
    migrate: bool = True
    fallback: float = 1.0
    """Seconds between checks for work that do not wait for a notification."""
    notify_interval: float = 0.005
    """At most one NOTIFY per this many seconds per process."""
    connect_timeout: float = 10.0
    rotate_every: int = 2_000
    """Messages between rotations of the message partitions (postgres_maintenance)."""
    rotate_max_move: int = 10_000
    """A partition with more live rows than this waits to be rotated until it drains."""
    maintenance_interval: float = 1.0
    """Seconds between rotation checks (0: no maintenance thread)."""


_MAX_SELECTIONS = 256


def _load_queries(schema: str) -> tuple[dict[str, str], dict[str, sql.Template]]:
    """The statements ready to run, and the templates selections and properties fill."""
    # The schema stores application/json as NULL; rows read back carry it spelled out.
    columns = ", ".join(
        "coalesce(m.content_type, 'application/json') AS content_type"
        if c == "content_type"
        else f"m.{c}"
        for c in (*MESSAGE_COLUMNS, "body_bytes")
    )
    fragments = {
        "message_columns": columns,
        "spool_columns": ", ".join(f"m.{c}" for c, _ in MESSAGES_TABLE),
        "spool_names": ", ".join(c for c, _ in MESSAGES_TABLE),
    }
    quoted = quote_schema(schema)
    return (
        sql.statements("postgresql", schema=quoted, fragments=fragments),
        sql.templates("postgresql", schema=quoted, fragments=fragments),
    )


class PostgresBackend:
    """Queue storage in a PostgreSQL schema (see the module docstring)."""

    dialect = "postgresql"
    polled_for_changes = False  # other processes' news arrives by LISTEN (on_change)

    def __init__(self, conninfo: str, settings: PostgresSettings | None = None) -> None:
        self.settings = settings or PostgresSettings()
        self.conninfo = conninfo
        self.schema = self.settings.schema
        self._schema_sql = quote_schema(self.schema)
        self._q, self._templates = _load_queries(self.schema)
        self._selections: dict[str, tuple[str, dict[str, Any]]] = {}
        self._channel = f"sluice_{self.schema}"
        self._kwargs: dict[str, Any] = {"connect_timeout": int(self.settings.connect_timeout)}
        if "application_name" not in conninfo:  # so operators can tell sluice's sessions apart
            self._kwargs["application_name"] = "sluice"
        self._uncertain: set[tuple[int, int]] = set()
        self._due = threading.local()  # see _keep_due
        self._peer_heard = float("-inf")
        self._listener: Listener | None = None
        self._closed = False
        try:
            with psycopg.connect(conninfo, autocommit=True, **self._kwargs) as conn:
                migrate(conn, self.schema, upgrade=self.settings.migrate)
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to PostgreSQL: {exc}") from exc
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = (
            psycopg_pool.ConnectionPool(
                conninfo,
                min_size=1,
                max_size=max(1, self.settings.pool_size),
                kwargs={"autocommit": True, **self._kwargs},
                open=False,
                name=f"sluice-{os.getpid()}",
                timeout=self.settings.connect_timeout,
                reconnect_timeout=0,
                configure=_configure,
            )
        )
        try:
            self._pool.open(wait=True, timeout=self.settings.connect_timeout)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StorageError(f"cannot connect to PostgreSQL at {conninfo!r}: {exc}") from exc
        self._notifier = Notifier(
            conninfo, self._kwargs, self._channel, self.settings.notify_interval
        )
        self._maintainer = (
            Maintainer(self, self.settings.maintenance_interval)
            if self.settings.maintenance_interval > 0
            else None
        )

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
        self._pool.close()

    def bind(self, connection: object) -> TxBackend:
        """The message operations, run on ``connection`` inside its transaction (outbox)."""
        from sluice.backends.postgres_outbox import ConnectionBackend  # noqa: PLC0415 (cycle)

        return ConnectionBackend(self, connection)

    # --- Spark streams and sinks (sluice.spark) -----------------------------------------
    def open_stream(self, queue: str, name: str) -> StreamState:
        key = {"queue": queue, "name": name}
        found = self._one("stream_find", key)
        if found:
            return StreamState(*found[0])
        params = {"host": stream_host(queue, name), "pid": 0, "lease": STREAM_LEASE}
        with self._transaction() as conn:
            session = _first(conn.execute(self._q["open_session"], params).fetchall())
            made = conn.execute(self._q["stream_insert"], key | {"session": session}).fetchall()
            if made:
                return StreamState(int(session), 0, 0)
            conn.execute(self._q["close_session"], {"session": session})
        found = self._one("stream_find", key)
        if not found:
            raise QueueNotFound(f"queue {queue!r} does not exist")
        return StreamState(*found[0])

    def set_stream_round(self, session: int, round: int) -> None:
        # Durable: its WAL flush also makes the round's claims (written before it) durable.
        self._one("stream_set_round", {"session": session, "round": round})

    def set_stream_acked(self, session: int, acked: int) -> None:
        self._one("stream_set_acked", {"session": session, "acked": acked})

    # A stream holds two kinds of rows: rounds of queues with lanes are claimed by the
    # engine (state 2, c_tx = the round), other rounds are moved into stream_spool.
    def stream_held(
        self,
        session: int,
        queue: str,
        after: int,
        upto: int,
        *,
        part: int = 0,
        parts: int = 1,
        spooled: bool = True,
    ) -> list[Row]:
        params = {"session": session, "queue": queue, "after": after, "upto": upto}
        rows = self._one("stream_held", params | {"part": part, "parts": parts})
        held = [(*message, r[21]) for message, r in zip(_rows(rows), rows, strict=True)]
        if spooled:
            from sluice.backends.postgres_spool import spooled_rows  # noqa: PLC0415 (Arrow)

            for table in self.stream_spooled(session, after, upto, part=part, parts=parts):
                held.extend(spooled_rows(table))
            held.sort(key=lambda r: (r[-1], r[0]))
        return held

    def stream_spooled(
        self, session: int, after: int, upto: int, *, part: int = 0, parts: int = 1
    ) -> list[pa.Table]:
        spooled = self._one("stream_spool_read", {"session": session, "after": after, "upto": upto})
        if not spooled:
            return []
        from sluice.backends.postgres_spool import readable  # noqa: PLC0415 (sluice[spark])

        return [readable(bytes(data), round_, part, parts) for round_, data in spooled]

    def stream_held_count(self, session: int, queue: str, after: int, upto: int) -> int:
        params = {"session": session, "queue": queue, "after": after, "upto": upto}
        return int(self._one("stream_held_count", params)[0][0])

    def stream_claim(
        self, session: int, round: int, queue: str, limit: int, select: Selection | None
    ) -> int:
        name, extra = self._selected("stream_take", select)
        params = {"queue": queue, "limit": limit, "now": time.time()} | extra
        from sluice.backends import postgres_spool as spool  # noqa: PLC0415 (Arrow: sluice[spark])

        # Relaxed, as every claim: set_stream_round's flush makes it durable.
        with self._transaction(durable=False) as conn:
            data = _copy_out(conn, self._q[name], params)
            if not data:
                return 0
            taken = spool.parse_csv(data)
            n: int = taken.num_rows
            spooled = {"session": session, "round": round, "chunk": spool.first_id(taken), "n": n}
            conn.execute(self._q["stream_spool_insert"], spooled | {"data": spool.pack(taken)})
            # Of a lane only its head is ready: taking it gives the lane its next head.
            lanes = sorted({k for k in taken["lane"].to_pylist() if k is not None})
            if lanes:
                conn.execute(self._q["promote"], _lanes_params([(queue, k) for k in lanes]))
        if lanes:
            self._notifier.signal([queue])
        return n

    def stream_settle(self, session: int, queue: str, after: int, upto: int) -> None:
        params = {"session": session, "queue": queue, "after": after, "upto": upto}
        with self._transaction() as conn:
            lanes = sorted(lane for (lane,) in conn.execute(self._q["stream_settle"], params))
            if lanes:
                conn.execute(self._q["promote"], _lanes_params([(queue, k) for k in lanes]))
            conn.execute(self._q["stream_spool_settle"], params)
            conn.execute(self._q["stream_set_acked"], {"session": session, "acked": upto})
        if lanes:
            self._notifier.signal([queue])  # lanes got new heads

    def scan(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> list[Row]:
        name, extra = self._selected("scan", select)
        params = browse_params(queue, state, limit, 0, 0) | extra | {"after": after, "upto": upto}
        return _rows(self._one(name, params))

    def id_bounds(self, queue: str) -> tuple[int, int, int]:
        low, high, count = self._one("id_bounds", {"queue": queue})[0]
        return (low or 0), (high or 0), count

    def drop_stream(self, queue: str, name: str) -> bool:
        with self._transaction() as conn:
            found = conn.execute(self._q["stream_find"], {"queue": queue, "name": name}).fetchall()
            if not found:
                return False
            session = {"session": found[0][0]}
            self._restore_spool(conn, session)
            conn.execute(self._q["stream_delete"], session)
            conn.execute(self._q["close_session"], session)
            self._roll_back_orphans(conn)
        self._notifier.signal()
        return True

    def _restore_spool(self, conn: psycopg.Connection[Any], session: dict[str, int]) -> None:
        """Put what the stream moved into its spool back into the queue, as it was."""
        blobs = conn.execute(self._q["stream_spool_all"], session).fetchall()
        if blobs:
            from sluice.backends import postgres_spool as spool  # noqa: PLC0415 (Arrow: sluice[spark])

            with conn.cursor().copy(self._q["stream_restore"]) as copy:
                for round_, data in blobs:
                    rows = spool.restore_rows(spool.unpack(bytes(data)), session["session"], round_)
                    for row in rows:
                        copy.write_row(row)
            conn.execute(self._q["stream_spool_drop"], session)

    def sink_batch(self, sink: str) -> int | None:
        found = _first(self._one("sink_batch", {"name": sink}))
        return None if found is None else int(found)

    def forget_sink(self, sink: str) -> None:
        self._one("sink_forget", {"name": sink})

    def close_staging(self, host: str, batch: int | None = None) -> None:
        self._close_sessions("staging_close", {"host": host, "pid": batch})

    def publish_staged(
        self, parts: Sequence[StagedPart], sink: str | None = None, batch: int = 0
    ) -> bool:
        try:
            with self._transaction() as conn:
                fresh = True
                if sink is not None:
                    locked = conn.execute(self._q["sink_batch_lock"], {"name": sink})
                    last = _first(locked.fetchall())
                    fresh = not sink_seen(sink, batch, None if last is None else int(last))
                    if fresh:
                        conn.execute(self._q["sink_record"], {"name": sink, "batch": batch})
                for part in parts if fresh else ():
                    plan = CommitPlan(part.session, part.tx, pending=part.rows, lanes=part.lanes)
                    for name, params in _commit_statements(plan):
                        conn.execute(self._q[name], params)
                    conn.execute(self._q["close_session"], {"session": part.session})
                if sink is not None:
                    orphans = {"host": sink_host(sink), "batch": batch}
                    conn.execute(self._q["sink_orphans"], orphans)
                    self._roll_back_orphans(conn)
        except _Expected as exc:
            raise LeaseLost(
                "staged messages are missing (their Spark task's session expired or was "
                "rolled back); nothing was published"
            ) from exc
        self._notifier.signal()
        return fresh

    # --- jobs (JobsBackend) -----------------------------------------------------------
    def jobs_read(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        # One statement, no BEGIN/COMMIT: a read needs no durability setting.
        return self._retrying(lambda: self._one(name, params))  # type: ignore[no-any-return]

    def jobs_write(self, steps: Sequence[Effect], *, durable: bool = True) -> bool:
        try:
            with self._transaction(durable=durable) as conn:
                run_steps(lambda name, params: conn.execute(self._q[name], params).rowcount, steps)
        except Unchanged:
            return False
        return True

    def on_change(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(queue)`` when another process may have made messages available."""
        if self._listener is None:
            self._listener = Listener(
                self.conninfo,
                self._kwargs,
                self._channel,
                callback,
                fallback=self.settings.fallback,
                origin=self._notifier.origin,
                on_peer=self._peer_seen,
            )

    def _peer_seen(self) -> None:
        self._peer_heard = time.monotonic()
        self._notifier.peers = True

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
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
                        raise _translate(exc) from exc
                    raise
        except psycopg_pool.PoolTimeout as exc:
            raise StorageError(f"no PostgreSQL connection could be had: {exc}") from exc

    def _unit(
        self, statements: Sequence[tuple[str, Any]], *, durable: bool = True
    ) -> list[list[Row]]:
        """Run statements as one transaction in one round trip; the rows of each."""
        with self._conn() as conn:
            cursors = []
            with conn.pipeline():
                conn.execute("BEGIN")
                if not durable:
                    conn.execute("SET LOCAL synchronous_commit TO off")
                for name, params in statements:
                    cursors.append(conn.execute(self._q[name], params))
                conn.execute("COMMIT")
            return [cur.fetchall() if cur.description else [] for cur in cursors]

    def _one(self, name: str, params: Any, *, durable: bool = True) -> list[Row]:
        """One statement as its own transaction; durable ones need no BEGIN/COMMIT."""
        if not durable:
            return self._unit([(name, params)], durable=False)[0]
        with self._conn() as conn:
            cur = conn.execute(self._q[name], params)
            return cur.fetchall() if cur.description else []

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
                if delay is None or not isinstance(exc.__cause__, psycopg.OperationalError):
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
        return bool(self._one("heartbeat", {"session": session}, durable=False))

    def close_session(self, session: int) -> None:
        self._close_sessions("close_session", {"session": session})
        self._notifier.signal()

    def _close_sessions(self, name: str, params: Mapping[str, Any]) -> None:
        """Delete sessions by the named statement and roll back what they held."""

        def work() -> None:
            with self._transaction() as conn:
                conn.execute(self._q[name], params)
                self._roll_back_orphans(conn)

        self._retrying(work)

    @contextmanager
    def _transaction(self, *, durable: bool = True) -> Iterator[psycopg.Connection[Any]]:
        """A transaction over several round trips, for the rare paths that must decide."""
        with self._conn() as conn:
            conn.execute("BEGIN")
            if not durable:
                conn.execute("SET LOCAL synchronous_commit TO off")
            yield conn
            conn.execute("COMMIT")

    def recover(self, is_dead: Callable[[SessionInfo], bool]) -> list[int]:
        def work() -> list[int]:
            with self._transaction(durable=False) as conn:
                locked = conn.execute(self._q["try_recovery_lock"], {"lock_class": LOCK_CLASS})
                if not _first(locked.fetchall()):
                    return []  # another node is recovering right now
                rows = conn.execute(self._q["list_sessions"], {"now": time.time()}).fetchall()
                # Alone in the schema (and nobody heard lately, for a newcomer may say
                # hello before its session is registered): no one to notify.
                recent = time.monotonic() - self._peer_heard < _PEER_MEMORY
                self._notifier.peers = len(rows) > 1 or recent
                dead = [s.id for s in (SessionInfo(*r) for r in rows) if is_dead(s)]
                for session in dead:
                    conn.execute(self._q["close_session"], {"session": session})
                self._roll_back_orphans(conn)
                conn.execute(self._q["expire"], {"now": time.time()})
                return dead

        dead: list[int] = self._retrying(work)
        if dead:
            self._notifier.signal()
        return dead

    def _roll_back_orphans(self, conn: psycopg.Connection[Any]) -> None:
        # Whatever a session no longer registered holds is rolled back here, so a
        # session recovered while it still worked cannot leave claims behind.
        lanes = conn.execute(self._q["dead_sessions_lanes"]).fetchall()
        for name in (
            "dead_sessions_pending",
            "dead_sessions_own_claims",
            "dead_sessions_dead_letter",
            "dead_sessions_release",
        ):
            conn.execute(self._q[name])
        if lanes:
            conn.execute(self._q["promote"], _lanes_params(lanes))

    def maintain(self, *, vacuum_too: bool = True) -> tuple[int | None, bool]:
        """Rotate the message partitions if due, and vacuum them if needed.

        Returns (the partition made current or None, whether it vacuumed); see
        ``postgres_maintenance``. One node at a time; the others skip.
        """
        rotation_lock, vacuum_lock = maintenance_locks(self.schema)
        with self._conn() as conn:
            rotated = with_lock(
                conn,
                rotation_lock,
                lambda: rotate(
                    conn,
                    self._q,
                    self.schema,
                    every=self.settings.rotate_every,
                    max_move=self.settings.rotate_max_move,
                ),
            )
            vacuumed = bool(
                vacuum_too
                and with_lock(conn, vacuum_lock, lambda: vacuum(conn, self._q, self.schema))
            )
        return rotated, vacuumed

    # --- catalog ---------------------------------------------------------------------
    def create_queue(self, spec: QueueSpec) -> None:
        try:
            self._one("insert_queue", spec_params(spec) | {"now": time.time()})
        except StorageError as exc:
            if isinstance(exc.__cause__, pg_errors.UniqueViolation):
                raise QueueExists(f"queue {spec.name!r} exists already") from exc.__cause__
            raise

    def alter_queue(self, spec: QueueSpec) -> None:
        with self._transaction() as conn:
            if conn.execute(self._q["update_queue"], spec_params(spec)).rowcount == 0:
                if conn.execute(self._q["get_queue"], {"name": spec.name}).fetchall():
                    raise isolation_in_use(spec.name)
                raise QueueNotFound(f"queue {spec.name!r} does not exist")

    def drop_queue(self, name: str) -> None:
        with self._transaction() as conn:
            params = {"name": name}
            if not conn.execute(self._q["lock_queue_row"], params).fetchall():
                raise QueueNotFound(f"queue {name!r} does not exist")
            users = [r[0] for r in conn.execute(self._q["queues_referencing"], params)]
            if users:
                raise queue_in_use(name, error_queue_of=users)
            busy = _first(conn.execute(self._q["queue_in_flight"], params).fetchall())
            if busy:
                raise queue_in_use(name, busy=busy)
            for (session,) in conn.execute(self._q["streams_of_queue"], params).fetchall():
                conn.execute(self._q["stream_spool_drop"], {"session": session})
                conn.execute(self._q["stream_delete"], {"session": session})
                conn.execute(self._q["close_session"], {"session": session})
            conn.execute(self._q["delete_queue_messages"], params)
            conn.execute(self._q["delete_queue_properties"], params)
            conn.execute(self._q["delete_queue"], params)

    def get_queue(self, name: str) -> QueueSpec | None:
        rows = self._retrying(lambda: self._one("get_queue", {"name": name}))
        return spec_from_row(rows[0]) if rows else None

    def list_queues(self) -> list[QueueSpec]:
        return [spec_from_row(r) for r in self._one("list_queues", {})]

    def create_type(self, name: str, kind: str, definition: str) -> None:
        params = {"name": name, "kind": kind, "definition": definition, "now": time.time()}
        try:
            self._one("insert_type", params)
        except StorageError as exc:
            if isinstance(exc.__cause__, pg_errors.UniqueViolation):
                raise ConfigurationError(f"message type {name!r} exists already") from None
            raise

    def message_types(self) -> dict[str, tuple[str, str]]:
        return {n: (k, d) for n, k, d in self._retrying(lambda: self._one("list_types", {}))}

    def create_property(
        self,
        name: str,
        expression: str,
        type: str,
        fills: Mapping[str, tuple[str, str, Any]],
        *,
        indexed: bool = True,
    ) -> None:
        params = {"name": name, "expression": expression, "type": type, "now": time.time()}
        try:
            with self._transaction() as conn:
                conn.execute(self._q["insert_property"], params)
                for queue, (slot, value, value_params) in fills.items():
                    if indexed:
                        conn.execute(self._q[f"slot_index_{slot}"])
                    link = {"queue": queue, "name": name, "slot": slot}
                    if conn.execute(self._q["insert_queue_property"], link).rowcount != 1:
                        raise QueueNotFound(f"queue {queue!r} does not exist")
                    # Messages already queued get the value too: one statement per queue.
                    fill = self._templates[f"property_fill_{slot}"].fill(value=value)
                    conn.execute(fill, value_params | {"queue": queue})
        except StorageError as exc:
            if isinstance(exc.__cause__, pg_errors.UniqueViolation):
                raise ConfigurationError(
                    f"property {name!r} exists already, or a queue has no free {type} slot"
                ) from None
            raise

    def queue_properties(self, queue: str) -> list[PropertyDef]:
        rows = self._retrying(lambda: self._one("queue_properties", {"queue": queue}))
        return [PropertyDef(*r) for r in rows]

    def expression_compiler(self, alias: str = "m") -> PostgresCompiler:
        """A compiler of expressions for this schema's SQL."""
        return PostgresCompiler(Source(alias=alias), schema=self._schema_sql)

    def _selected(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]:
        """The name of the query shaped by ``select``, and the selection's parameters.

        Values are parameters, so selections that differ only in their values
        share one query text (and one prepared statement): the texts are
        registered once, keyed by the text itself, and never removed.
        """
        if select is None:
            return name, {}
        key = f"{name}#{select.key}"
        cached = self._selections.get(key)
        if cached is None:
            if len(self._selections) >= _MAX_SELECTIONS:
                self._selections = {}  # selections written with inline values are each new
            alias = "m" if name in ("browse", "scan") else "s"
            where, order, params = compile_selection(
                select,
                lambda source: PostgresCompiler(source, schema=self._schema_sql),
                alias,
            )
            text = self._templates[name].fill(select=where, order=order)
            self._q.setdefault(text, text)
            cached = self._selections[key] = (text, params)
        return cached

    # --- messages --------------------------------------------------------------------
    def append(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> None:
        statements = [_enqueue(session, tx, envelopes, ready, durable)]
        lanes = sorted({(e.queue, e.lane) for e in envelopes if e.lane is not None})
        if ready and lanes:
            statements.append(("promote", _lanes_params(lanes)))
        notified = self._run_checked(statements, envelopes, durable=durable)
        if ready and not notified:
            self._notifier.signal(e.queue for e in envelopes)

    def _run_checked(
        self,
        statements: list[tuple[str, Any]],
        envelopes: Sequence[Envelope],
        *,
        durable: bool = True,
    ) -> bool:
        """Run a unit whose ``expect()`` failures mean a missing queue or a lost lease.

        A single statement runs on its own, in one round trip (``enqueue`` relaxes
        its own commit where it may); several run as one pipelined transaction.
        Returns whether the unit carried a wake-up NOTIFY itself.
        """
        notified = False
        try:
            if len(statements) == 1 and statements[0][0] == "enqueue":
                ((name, params),) = statements
                if params["ready"] and self._notifier.take_turn():
                    note = payload(self._notifier.origin, (e.queue for e in envelopes))
                    name = "enqueue_notify"
                    params = params | {"channel": self._channel, "payload": note}
                    notified = True
                self._one(name, params)
            elif len(statements) == 1 and durable:
                self._one(*statements[0])
            else:
                self._unit(statements, durable=durable)
        except _Expected as exc:
            if exc.what == "queue not found":
                raise self._queue_not_found(envelopes) from None
            raise
        return notified

    def _queue_not_found(self, envelopes: Sequence[Envelope]) -> QueueNotFound:
        existing = {spec.name for spec in self.list_queues()}
        missing = sorted({e.queue for e in envelopes} - existing)
        return QueueNotFound(f"queue {', '.join(map(repr, missing))} does not exist")

    def claim(
        self,
        session: int,
        tx: int,
        queue: str,
        limit: int,
        *,
        own: bool,
        select: Selection | None = None,
        lanes: Sequence[str] = (),
        fill: bool = True,
    ) -> list[Row]:
        return claim_rounds(
            lambda name, params: self._claim(session, tx, name, params),
            self._selected,
            session=session,
            tx=tx,
            queue=queue,
            limit=limit,
            own=own,
            select=select,
            lanes=lanes,
            fill=fill,
            suffix="",
        )

    def _claim(self, session: int, tx: int, name: str, params: dict[str, Any]) -> list[Row]:
        try:
            # One statement that relaxes its own commit: one round trip.
            rows = self._one(name, params)
        except StorageError as exc:
            if isinstance(exc.__cause__, psycopg.OperationalError):
                # The claim may have committed before the connection broke: the
                # transaction's end must then settle rows it never heard of.
                self._uncertain.add((session, tx))
            raise
        return self._keep_due(params["queue"], rows)

    def lane_fronts(self, queue: str, lanes: Sequence[str]) -> dict[str, tuple[int, int]]:
        return fronts(lanes, self._unit(lane_front_statements(queue, lanes), durable=False))

    def _keep_due(self, queue: str, rows: list[Row]) -> list[Row]:
        """Claimed rows; an empty claim's answer to ``next_due`` is kept for this thread."""
        if rows and rows[0][0] is None:
            self._due.answer = (queue, rows[0][12])
            return []
        return _rows(rows)

    def release(
        self, session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None:
        self._unit(release_statements(session, tx, refs, lanes), durable=False)
        self._notifier.signal()

    def commit(self, plan: CommitPlan) -> None:
        key = {"session": plan.session, "tx": plan.tx}
        statements = _commit_statements(plan)
        if (plan.session, plan.tx) in self._uncertain:
            # Claims whose outcome was unknown go back; the known ones are settled.
            statements += [("release", key | {"ids": None})]
        try:
            notified = self._run_checked(statements, plan.enqueues, durable=plan.durable)
        except _Expected as exc:
            raise commit_failure(plan, exc) from exc
        self._uncertain.discard((plan.session, plan.tx))
        if (plan.pending or plan.rejects) and not notified:
            self._notifier.signal(None)  # which queues gained is not known here
        elif plan.enqueues and not notified:
            self._notifier.signal(e.queue for e in plan.enqueues)

    def abort(self, session: int, tx: int, held: Sequence[int], lanes: Sequence[Lane] = ()) -> None:
        key = {"session": session, "tx": tx, "ids": None}  # all it holds, known or not
        # Idempotent, so it is retried through a server restart: an abort that
        # failed would leave claims behind until the session ends.
        statements = abort_statements(key, bool(held) or (session, tx) in self._uncertain, lanes)
        self._retrying(lambda: self._unit(statements, durable=False))
        self._uncertain.discard((session, tx))
        if held:
            self._notifier.signal()

    def browse(
        self,
        queue: str,
        state: str,
        limit: int,
        session: int,
        tx: int,
        *,
        select: Selection | None = None,
    ) -> list[Row]:
        name, extra = self._selected("browse", select)
        params = browse_params(queue, state, limit, session, tx) | extra
        return _rows(self._one(name, params))

    def purge(self, queue: str, state: str, before: float) -> int:
        code = {"expired": 3, "failed": 4}[state]
        with self._transaction() as conn:
            conn.execute(self._q["expire"], {"now": time.time()})
            params = {"queue": queue, "state": code, "before": before}
            return conn.execute(self._q["purge"], params).rowcount

    def stats(self, queue: str) -> dict[str, int]:
        counts = dict.fromkeys(("ready", "delayed", "pending", "claimed", "expired", "failed"), 0)
        now = time.time()
        _, rows = self._unit(
            [("expire", {"now": now}), ("stats", {"queue": queue, "now": now})], durable=False
        )
        for state, delayed, n in rows:
            name = "delayed" if state in (1, 5) and delayed else _STATE_NAMES[state]
            counts[name] += n
        return counts

    def next_due(self, queue: str) -> float | None:
        # Asked right after an empty claim, whose statement answered it already.
        answer, self._due.answer = getattr(self._due, "answer", None), None
        if answer is not None and answer[0] == queue:
            return None if answer[1] is None else float(answer[1])
        rows = self._one("next_due", {"queue": queue, "now": time.time()})
        value = _first(rows)
        return None if value is None else float(value)

    def change_token(self) -> int:
        # Never polled (polled_for_changes is False): news arrives through on_change.
        return 0


# --- statements ----------------------------------------------------------------------
def _enqueue(
    session: int, tx: int, envelopes: Sequence[Envelope], ready: bool, durable: bool
) -> tuple[str, Any]:
    """The enqueue statement: envelopes travel as one JSON array, unpacked by the server.

    (One text parameter, encoded in C, costs less than an array per field.)
    """
    rows = [
        {
            "queue": e.queue,
            "num": e.num,
            "priority": e.priority,
            "body": None if isinstance(e.body, bytes) else _text(e.body),
            "body_b64": base64.b64encode(e.body).decode() if isinstance(e.body, bytes) else None,
            "content_type": e.content_type,
            "properties": e.properties,
            "correlation_id": e.correlation_id,
            "reply_to": e.reply_to,
            "enqueued_at": e.enqueued_at,
            "available_at": e.available_at,
            "expires_at": e.expires_at,
            "type": e.type,
            **({"grp": e.group, "lane": e.lane} if e.lane is not None else {}),
            **_slot_values(e),
        }
        for e in envelopes
    ]
    params = {
        "session": session,
        "tx": tx,
        "ready": ready,
        "queues": sorted({e.queue for e in envelopes}),
        "rows": encode_json(rows),
        "durable": durable,
    }
    return "enqueue", params


def _slot_values(e: Envelope) -> dict[str, Any]:
    """Declared properties' values; left out when there are none (the common case)."""
    return dict(zip(SLOTS, e.keys, strict=True)) if e.keys is not None else {}


def fronts(lanes: Sequence[str], results: Sequence[list[Row]]) -> dict[str, tuple[int, int]]:
    """lane_front's answers by lane (a lane with nothing waiting has none)."""
    return {
        lane: (rows[0][0], rows[0][1]) for lane, rows in zip(lanes, results, strict=True) if rows
    }


def _lanes_params(lanes: Sequence[Lane] | Sequence[Row]) -> dict[str, Any]:
    return {"lane_queues": [q for q, _ in lanes], "lane_keys": [lane for _, lane in lanes]}


def release_statements(
    session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane]
) -> list[tuple[str, Any]]:
    """Give back held messages (out of attempts: to the error queue); their lanes get heads."""
    params = {"session": session, "tx": tx, "ids": list(refs)}
    statements: list[tuple[str, Any]] = [("dead_letter", params), ("release", params)]
    if lanes:
        statements.append(("promote", _lanes_params(lanes)))
    return statements


def lane_front_statements(queue: str, lanes: Sequence[str]) -> list[tuple[str, Any]]:
    return [("lane_front", {"queue": queue, "lane": lane}) for lane in lanes]


def abort_statements(
    key: dict[str, Any], held: bool, lanes: Sequence[Lane]
) -> list[tuple[str, Any]]:
    """An abort's statements: pending rows go, held ones go back, their lanes get heads."""
    statements: list[tuple[str, Any]] = [("delete_pending", key)]
    if held:
        statements += [("delete_own_claimed", key), ("dead_letter", key), ("release", key)]
        if lanes:
            statements.append(("promote", _lanes_params(lanes)))
    return statements


def claim_rounds(
    run: Callable[[str, dict[str, Any]], list[Row]],
    selected: Callable[[str, Selection | None], tuple[str, dict[str, Any]]],
    *,
    session: int,
    tx: int,
    queue: str,
    limit: int,
    own: bool,
    select: Selection | None,
    lanes: Sequence[str],
    fill: bool,
    suffix: str,
) -> list[Row]:
    """Claim in rounds: of a lane only the head is claimable, or the next message for the
    lane's holder, so lanes taken in one round offer their next message to the next.

    Without lanes involved this is one statement, as always.
    """
    base = "claim_with_own" if own else "claim"
    owned = set(lanes)
    rows: list[Row] = []
    while len(rows) < limit:
        name, extra = selected(f"{base}_lanes{suffix}" if owned else f"{base}{suffix}", select)
        params = {"session": session, "tx": tx, "queue": queue, "limit": limit - len(rows),
                  "now": time.time()} | extra  # fmt: skip
        if owned:
            # A lane's run is taken whole; with a selection only its next message,
            # which is the one the selection may judge without skipping any.
            params["lanes"] = sorted(owned)
            params["run"] = 1 if select is not None else limit - len(rows)
            params["fill"] = fill or not lanes  # lanes found in this call: fill as asked
        taken = run(name, params)
        if not taken:
            break
        rows += taken
        more = {r[19] for r in taken if r[19] is not None and (r[3], r[4]) != (session, tx)}
        if not more:
            break  # no lane took part: this round took all there was
        owned |= more
    return rows


def _commit_statements(plan: CommitPlan, *, in_caller_tx: bool = False) -> list[tuple[str, Any]]:
    key = {"session": plan.session, "tx": plan.tx}
    statements: list[tuple[str, Any]] = []
    if plan.effects:
        plain = _commit_statements(replace(plan, effects=()), in_caller_tx=in_caller_tx)
        # The effects' own expect() checks their row counts (jobs.sql).
        return plain + [(e.name, e.params) for e in plan.effects]
    if plan.lanes and plan.held and not (plan.rejects or plan.pending or plan.enqueues):
        # The common commit of a lane's reader: one statement settles and promotes.
        settle = key | {"ids": list(plan.held)} | _lanes_params(plan.lanes)
        return [("settle", settle)]
    if plan.lanes and (plan.pending or plan.enqueues):
        # Queue locks before lane locks, in every transaction that takes both (the
        # enqueue takes its queues' locks, promote its lanes'): no deadlocks.
        queues = sorted({e.queue for e in plan.enqueues})
        statements.append(("commit_lock", key | {"lock_class": LOCK_CLASS, "queues": queues}))
    if plan.held:
        for ref, reason in plan.rejects.items():
            statements.append(("reject", key | {"id": ref, "reason": reason}))
        remaining = [ref for ref in plan.held if ref not in plan.rejects]
        if remaining:
            params = key | {"ids": remaining, "expected": len(remaining)}
            statements.append(("delete_claimed", params))
    if plan.pending:
        # The lock covers the pending rows' queues and the new ones (enqueue
        # takes it again: advisory locks nest within a transaction).
        queues = sorted({e.queue for e in plan.enqueues})
        lock = key | {"lock_class": LOCK_CLASS, "queues": queues}
        statements += [("commit_lock", lock), ("publish_pending", key | {"pending": plan.pending})]
    if plan.enqueues:
        # Inside a larger unit the unit decides durability; alone, enqueue does.
        durable = plan.durable or len(statements) > 0 or in_caller_tx or bool(plan.lanes)
        statements.append(_enqueue(plan.session, plan.tx, plan.enqueues, True, durable))
    if plan.lanes:
        statements.append(("promote", _lanes_params(plan.lanes)))
    return statements


def commit_failure(plan: CommitPlan, exc: _Expected) -> SluiceError:
    """What a commit whose ``expect()`` failed raises: a jobs effect's, or a lost lease."""
    if exc.what.startswith("effect: "):
        return Conflict(f"{exc.what.removeprefix('effect: ')}; nothing was changed")
    return _lease_lost(plan)


def _text(body: str) -> str:
    if "\x00" in body:
        raise InvalidBody(
            "PostgreSQL text cannot hold NUL characters; send the body as bytes instead"
        )
    return body


def _rows(rows: list[Row]) -> list[Row]:
    """Message rows in MESSAGE_COLUMNS order: a binary body takes the body's place."""
    return [r[:20] if r[20] is None else (*r[:6], bytes(r[20]), *r[7:20]) for r in rows]


def _copy_out(conn: psycopg.Connection[Any], query: str, params: Mapping[str, Any]) -> bytes:
    """What ``COPY ... TO STDOUT`` sends, in one piece.

    psycopg's copy waits on the socket once per row, about 10 microseconds a row: most
    of a stream's claim. This reads every row libpq has buffered and waits only when
    it has none. It never blocks inside libpq: that would hold the GIL while the
    statement waits for a lock, and the holder of the lock may be a thread of this
    very process (the maintainer), which then can never let go.
    """
    pgconn = conn.pgconn
    pgconn.send_query(psycopg.ClientCursor(conn).mogrify(query, params).encode())
    while pgconn.flush():
        select.select([], [pgconn.socket], [])
    parts = []
    error = None
    while (result := _next_result(pgconn)) is not None:
        if result.status == psycopg.pq.ExecStatus.COPY_OUT:
            while True:
                size, data = pgconn.get_copy_data(1)  # 0: none buffered; -1 done; -2 failed
                if size > 0:
                    parts.append(data)
                elif size == 0:
                    select.select([pgconn.socket], [], [])
                    pgconn.consume_input()
                else:
                    break
        elif result.status != psycopg.pq.ExecStatus.COMMAND_OK:
            error = psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
    if error is not None:
        raise error
    return b"".join(parts)


def _next_result(pgconn: psycopg.pq.abc.PGconn) -> psycopg.pq.abc.PGresult | None:
    """The next result, waiting on the socket (without the GIL) until it is complete."""
    while pgconn.is_busy():
        select.select([pgconn.socket], [], [])
        pgconn.consume_input()
    return pgconn.get_result()


def _first(rows: list[Row]) -> Any:
    return rows[0][0] if rows else None


class _Expected(StorageError):
    """An ``expect()`` check failed inside the database; ``what`` says which."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _configure(conn: psycopg.Connection[Any]) -> None:
    # Every statement is prepared, and a generic plan suits all of them (they
    # find rows through one queue's index whatever the parameters): without
    # this the server would plan each execution anew, which costs more than
    # executing a claim.
    conn.execute("SET plan_cache_mode = force_generic_plan")
    # Nor JIT: on a queue of a million messages with statistics, a claim's estimated
    # cost (its never-run "when is the next one due" branch) passes jit_above_cost,
    # and compiling it took 80 ms where running it takes 0.3 ms.
    conn.execute("SET jit = off")


def _rollback(conn: psycopg.Connection[Any]) -> None:
    if conn.closed:
        return
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            conn.close()  # the pool discards it


def _lease_lost(plan: CommitPlan) -> LeaseLost:
    return LeaseLost(
        f"transaction {plan.session}/{plan.tx} was rolled back because its session's lease "
        "expired (the process stalled or lost the database); nothing of it was committed"
    )


def _translate(exc: psycopg.Error) -> StorageError:
    if exc.sqlstate == "SL001" and exc.diag.message_primary:
        return _Expected(exc.diag.message_primary)
    if isinstance(exc, psycopg.OperationalError):
        return StorageError(
            f"the PostgreSQL connection failed ({exc}); the outcome of the last operation is "
            "unknown unless it is retried: abort the transaction and start again"
        )
    return StorageError(f"PostgreSQL failed: {exc}")
