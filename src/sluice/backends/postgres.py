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
from sluice.backends.idempotency import SqlIdempotency
from sluice.backends.keys import SqlKeys
from sluice.backends.records import (
    CommitPlan,
    ConnectionLost,
    Envelope,
    Lane,
    MessageRow,
    QueueCounts,
    Row,
    Selection,
    SessionInfo,
    browse_params,
)
from sluice.backends.rules import SqlRules
from sluice.backends.selection import compile_selection
from sluice.backends.sql_backend import (
    PURGEABLE,
    SqlBackend,
    SqlConnection,
    queue_counts,
    state_counts,
)
from sluice.backends.topics import SqlTopics
from sluice.clock import Clock, OffsetClock
from sluice.errors import MissingDependency, QueueNotFound, StorageError
from sluice.expr.postgres import PostgresCompiler, json_body
from sluice.expr.sql import Source
from sluice.extras import install_hint
from sluice.message import TEXT

try:
    import psycopg
    import psycopg_pool
    from psycopg.pq import TransactionStatus
except ImportError as _missing:  # pragma: no cover - depends on the installation
    raise MissingDependency(
        f"the PostgreSQL backend needs psycopg 3 and its pool ({_missing}): "
        f"{install_hint('postgres')}"
    ) from _missing

from sluice.backends.postgres_maintenance import (
    Maintainer,
    maintenance_locks,
    refresh_statistics,
    rotate,
    vacuum,
    with_lock,
)
from sluice.backends.postgres_notify import Listener, Notifier, payload
from sluice.backends.postgres_outbox import PostgresOutbox
from sluice.backends.postgres_queries import load_queries
from sluice.backends.postgres_schema import LOCK_CLASS, RULES_LOCK_CLASS, migrate, quote_schema
from sluice.backends.postgres_settings import PostgresSettings
from sluice.backends.postgres_statements import (
    Expected,
    Route,
    abort_statements,
    claim_answer,
    claim_rounds,
    commit_failure,
    commit_statements,
    credit_limit,
    credit_statements,
    enqueue_statement,
    first,
    fronts,
    lane_front_statements,
    lanes_params,
    message_rows,
    offset_between,
    release_statements,
    server_offset,
    translate,
)
from sluice.backends.postgres_streams import PostgresStreams

__all__ = ["PostgresBackend", "PostgresSettings"]

_PEER_MEMORY = 60.0  # seconds a notification from another Database counts as a peer
_RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)  # ~6 s: a server restart's worth
_MAX_SELECTIONS = 256
# The statements whose selection names the messages table "m" (the others, "s").
_ALIAS_M = frozenset(
    {
        "browse",
        "browse_done",
        "scan",
        "claimed_in_order",
        "failed_origins",
        "retry_failed",
        "discard_failed",
    }
)


class PostgresBackend(
    SqlBackend, PostgresStreams, SqlTopics, SqlRules, SqlKeys, SqlIdempotency, SqlGateways, Backend
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
                # Message times by the server's clock, whichever host reads it: so hosts
                # whose clocks disagree still agree on when a message is due.
                self.server_time = OffsetClock(server_offset(conn, self._q["server_time"]))
        except psycopg.Error as exc:
            raise StorageError(f"cannot connect to PostgreSQL: {exc}") from exc
        self.clock: Clock = clock or self.server_time
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
            conninfo, self._kwargs, self.channel, self.settings.notify_interval
        )
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
        self._pool.close()

    def on_change(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(queue)`` when another process may have made messages available."""
        if self._listener is None:
            self._listener = Listener(
                self.conninfo,
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
                        raise translate(exc) from exc
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
            conn.execute("BEGIN")
            if not durable:
                conn.execute("SET LOCAL synchronous_commit TO off")
            yield conn
            conn.execute("COMMIT")

    def recover(self, is_dead: Callable[[SessionInfo], bool]) -> list[int]:
        def work() -> list[int]:
            with self._transaction(durable=False) as conn:
                # A process stopped inside this transaction (SIGSTOP, a frozen VM) would
                # hold the recovery lock, and with it everyone's recovery, for as long as
                # it is stopped: the server ends its connection after a few idle seconds.
                conn.execute(self._q["recovery_idle_limit"])
                locked = conn.execute(self._q["try_recovery_lock"], {"lock_class": LOCK_CLASS})
                if not first(locked.fetchall()):
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
            # Every tick: one catalog read, an ANALYZE only when the planner is far off.
            with_lock(conn, vacuum_lock, lambda: refresh_statistics(conn, self._q, self.schema))
            vacuumed = bool(
                vacuum_too
                and with_lock(conn, vacuum_lock, lambda: vacuum(conn, self._q, self.schema))
            )
        return rotated, vacuumed

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
            return int(conn.execute(self._q[name], params).rowcount)

    def _promote(self, conn: SqlConnection, lanes: Sequence[Lane]) -> None:
        conn.execute(self._q["promote"], lanes_params(lanes))

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

    _NO_LIMIT = None  # LIMIT NULL: all

    def _compiler(self, source: Source, prefix: str) -> PostgresCompiler:
        return PostgresCompiler(source, schema=self._schema_sql, prefix=prefix)

    # --- the rules engine's dialect parts (backends/rules.py) --------------------------
    @property
    def _rules_schema(self) -> str:
        return f"{self._schema_sql}."

    _rules_insert_marks_done = True

    def _rules_enqueue(
        self, conn: psycopg.Connection[Any], session: int, tx: int, envelopes: Sequence[Envelope]
    ) -> None:
        plan = CommitPlan(session=session, tx=tx, enqueues=envelopes)
        try:
            for name, params in commit_statements(plan, in_caller_tx=True):
                conn.execute(self._q[name], params)
        except psycopg.Error as exc:
            error = translate(exc)
            if isinstance(error, Expected) and error.what == "queue not found":
                raise self.queue_not_found(envelopes) from None
            raise

    def _rules_ids(self, values: Sequence[int]) -> str:
        # An array literal: psycopg adapts a list of ints element by element, several
        # times slower, and a batch sends its ids in four or five parameters.
        return "{" + ",".join(str(int(v)) for v in values) + "}"

    def _rules_translate(self, exc: Exception) -> Exception | None:
        return translate(exc) if isinstance(exc, psycopg.Error) else None

    def _rules_exclusive(self, conn: psycopg.Connection[Any], key: int) -> None:
        conn.execute(self._q["rules_lock"], {"lock_class": RULES_LOCK_CLASS, "key": key})

    def _rules_enqueue_lock(self, conn: psycopg.Connection[Any], queue_ids: Sequence[int]) -> None:
        params = {"lock_class": LOCK_CLASS, "queue_ids": list(queue_ids)}
        conn.execute(self._q["rules_commit_lock"], params)

    def rules_object(self, pairs: Sequence[tuple[str, str, str]], *, strip: bool) -> str:
        # json, not jsonb: written as text at once, where jsonb would build a tree first.
        items = ", ".join(f"'{key}', {sql}" for key, sql, _ in pairs)
        built = f"json_build_object({items})"
        return f"json_strip_nulls({built})::text" if strip else f"{built}::text"

    def rules_inherited(self, name: str) -> str:
        return f"(m.properties::jsonb -> '{name}')"

    def rules_body(self, kind: str, sql: str) -> str | None:
        if kind == "same":
            return ", m.body AS body, m.body_bytes AS body_bytes, m.content_type AS content_type"
        if kind == "json":
            return f", ({sql})::text AS body, NULL::bytea AS body_bytes, NULL AS content_type"
        if kind == "scalar":
            return (
                f", (({sql})::jsonb -> 0)::text AS body, NULL::bytea AS body_bytes, "
                "NULL AS content_type"
            )
        if kind == "text":
            return f", ({sql})::text AS body, NULL::bytea AS body_bytes, '{TEXT}' AS content_type"
        return None

    def _rules_made_from(self, ids: str, number: int) -> str:
        # The trigger's bit in its pick (rules_insert's t), not m.id = ANY(ids): a
        # generic plan tests = ANY against a parameter element by element, and a batch
        # of 25,000 spent 1.4 s per action on it.
        return f"FROM t AS m WHERE (m.pick >> {int(number)}) & 1 = 1"

    _rules_parsing = frozenset({"rules_take_evaluate"})

    def _rules_parsed(self, columns: str) -> str:
        # rules_insert's t and rules_take_evaluate's m have every trigger's JSON body
        # parsed once, as j.
        return columns.replace(json_body("m"), "m.j")

    _rules_made_body = "n.body, n.body_bytes, n.content_type"
    _rules_made_size = "coalesce(octet_length(n.body), octet_length(n.body_bytes), 0)"

    def _rules_committed(self, queues: set[str]) -> None:
        self._notifier.signal(queues)

    def _selection(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]:
        found, params = self.selected(name, select)
        return self._q[found], params

    def _made_available(self, queues: set[str]) -> None:
        # Sent now, not by the coalescing Notifier: resumes and retries are rare, and the
        # process that made them (a CLI command) may end before that thread's turn.
        note = payload(self._notifier.origin, queues)
        self._write_rows("notify", {"channel": self.channel, "payload": note}, durable=False)

    def selected(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]:
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
            alias = "m" if name in _ALIAS_M else "s"
            where, order, params = compile_selection(
                select,
                lambda source: PostgresCompiler(source, schema=self._schema_sql),
                alias,
            )
            text = self._templates[name].fill_selection(where, order)
            self._q.setdefault(text, text)
            cached = self._selections[key] = (text, params)
        return cached

    # --- messages --------------------------------------------------------------------
    def append(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> None:
        statements = self.append_statements(session, tx, envelopes, ready=ready, durable=durable)
        notified = self._run_checked(statements, envelopes, durable=durable)
        self.appended(envelopes, ready=ready, notified=notified)

    def _run_checked(
        self,
        statements: list[tuple[str, Any]],
        envelopes: Sequence[Envelope],
        *,
        durable: bool = True,
    ) -> bool:
        """Run a unit whose ``expect()`` failures mean a missing queue or a lost lease.

        Returns whether the unit carried a wake-up NOTIFY itself.
        """
        route = self.route(statements, envelopes, durable=durable)
        try:
            if route.single:
                self._one(*route.statements[0])
            else:
                self._unit(route.statements, durable=route.durable)
        except Expected as exc:
            if exc.what == "queue not found":
                raise self.queue_not_found(envelopes) from None
            raise
        return route.notified

    # --- what a unit of work decides before and after its round trips ----------------
    # No IO: sluice.aio runs the same statements on asyncio connections and calls these.
    def append_statements(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> list[tuple[str, Any]]:
        """The statements of ``append``."""
        statements = [enqueue_statement(session, tx, envelopes, ready, durable)]
        lanes = sorted({(e.queue, e.lane) for e in envelopes if e.lane is not None})
        if ready and lanes:
            statements.append(("promote", lanes_params(lanes)))
        return statements

    def route(
        self, statements: list[tuple[str, Any]], envelopes: Sequence[Envelope], *, durable: bool
    ) -> Route:
        """How a unit runs: a single statement on its own, in one round trip (``enqueue``
        relaxes its own commit where it may, and carries the NOTIFY when its turn
        comes); several as one pipelined transaction."""
        if len(statements) == 1 and statements[0][0] == "enqueue":
            params = statements[0][1]
            if params["ready"] and self._notifier.take_turn():
                note = payload(self._notifier.origin, (e.queue for e in envelopes))
                params = params | {"channel": self.channel, "payload": note}
                return Route([("enqueue_notify", params)], True, True, True)
            return Route(statements, True, True, False)
        if len(statements) == 1 and durable:
            return Route(statements, True, True, False)
        if (
            len(statements) == 2
            and statements[0][0] == "enqueue"
            and statements[1][0] == "idempotency_record"
        ):
            # An effect with a statement of its own joined with the enqueue
            # (idempotency.sql): one statement, one round trip, no BEGIN and COMMIT.
            # (psycopg costs about as much CPU per statement as the database does per
            # small insert.)
            joined = statements[0][1] | statements[1][1]
            return Route([("enqueue_idempotency_record", joined)], True, True, False)
        return Route(statements, False, durable, False)

    def appended(self, envelopes: Sequence[Envelope], *, ready: bool, notified: bool) -> None:
        """``append`` is done: other processes hear of ready messages."""
        if ready and not notified:
            self._notifier.signal(e.queue for e in envelopes)

    def commit_unit(self, plan: CommitPlan) -> list[tuple[str, Any]]:
        """The statements of ``commit``."""
        statements = commit_statements(plan)
        if (plan.session, plan.tx) in self._uncertain:
            # Claims whose outcome was unknown go back; the known ones are settled.
            key = {"session": plan.session, "tx": plan.tx}
            statements += [("release", key | {"ids": None})]
        return statements

    def committed(self, plan: CommitPlan, *, notified: bool) -> None:
        """``commit`` is done: other processes hear of what it made available."""
        self._uncertain.discard((plan.session, plan.tx))
        if (plan.pending or plan.rejects) and not notified:
            self._notifier.signal(None)  # which queues gained is not known here
        elif plan.enqueues and not notified:
            self._notifier.signal(e.queue for e in plan.enqueues)
        if plan.freed:  # credit freed: waiters of capped queues elsewhere may take more
            self._notifier.signal(plan.freed)

    def claim_unknown(self, session: int, tx: int) -> None:
        """A claim's connection broke: it may have committed, so the transaction's end must
        settle rows it never heard of."""
        self._uncertain.add((session, tx))

    def released(self) -> None:
        """``release`` is done: other processes may take the messages."""
        self._notifier.signal()

    def abort_unit(
        self, session: int, tx: int, held: Sequence[int], lanes: Sequence[Lane]
    ) -> list[tuple[str, Any]]:
        """The statements of ``abort``: all it holds, known or not."""
        key = {"session": session, "tx": tx, "ids": None}
        return abort_statements(key, bool(held) or (session, tx) in self._uncertain, lanes)

    def aborted(self, session: int, tx: int, held: Sequence[int]) -> None:
        """``abort`` is done: other processes may take what it held."""
        self._uncertain.discard((session, tx))
        if held:
            self._notifier.signal()

    def queue_not_found(self, envelopes: Sequence[Envelope]) -> QueueNotFound:
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
        capped: bool = False,
    ) -> list[MessageRow]:
        if capped:
            return self._capped_claim(session, tx, queue, limit, own, select, lanes, fill)
        return claim_rounds(
            lambda name, params: self._claim(session, tx, name, params),
            self.selected,
            clock=self.clock,
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

    def _claim(self, session: int, tx: int, name: str, params: dict[str, Any]) -> list[MessageRow]:
        try:
            # One statement that relaxes its own commit: one round trip.
            rows = self._one(name, params)
        except StorageError as exc:
            if isinstance(exc, ConnectionLost):
                self.claim_unknown(session, tx)
            raise
        return self.keep_due(params["queue"], rows)

    def _capped_claim(  # noqa: PLR0917 (claim's arguments, passed on)
        self,
        session: int,
        tx: int,
        queue: str,
        limit: int,
        own: bool,
        select: Selection | None,
        lanes: Sequence[str],
        fill: bool,
    ) -> list[MessageRow]:
        """A claim on a queue with max_in_flight: the queue's credit lock, its count and the
        claim in one transaction, so its claimers anywhere never hold more than the cap.

        Three round trips (the count, the claim, the commit) where an uncapped claim
        takes one: the cap costs only the queues that have one.
        """
        try:
            with self._conn() as conn, conn.pipeline():
                conn.execute("BEGIN")
                conn.execute("SET LOCAL synchronous_commit TO off")
                for name, params in credit_statements(queue):
                    cur = conn.execute(self._q[name], params)
                credit = credit_limit(limit, cur.fetchall())
                rows = []
                if credit:
                    rows = claim_rounds(
                        lambda name, params: self.keep_due(
                            queue, conn.execute(self._q[name], params).fetchall()
                        ),
                        self.selected,
                        clock=self.clock,
                        session=session,
                        tx=tx,
                        queue=queue,
                        limit=credit,
                        own=own,
                        select=select,
                        lanes=lanes,
                        fill=fill,
                        suffix="",
                    )
                conn.execute("COMMIT")
        except StorageError as exc:
            if isinstance(exc, ConnectionLost):
                self.claim_unknown(session, tx)
            raise
        return rows

    def lane_fronts(self, queue: str, lanes: Sequence[str]) -> dict[str, tuple[int, int]]:
        return fronts(lanes, self._unit(lane_front_statements(queue, lanes), durable=False))

    def keep_due(self, queue: str, rows: list[Row]) -> list[MessageRow]:
        """Claimed rows; an empty claim's answer to ``next_due`` is kept for this thread."""
        claimed, due = claim_answer(rows)
        if due is not None:
            self._due.answer = (queue, due[0])
        return claimed

    def release(
        self, session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None:
        self._unit(release_statements(session, tx, refs, lanes), durable=False)
        self.released()

    def commit(self, plan: CommitPlan) -> None:
        try:
            notified = self._run_checked(
                self.commit_unit(plan), plan.enqueues, durable=plan.durable
            )
        except Expected as exc:
            raise commit_failure(plan, exc) from exc
        self.committed(plan, notified=notified)

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
        code = PURGEABLE[state]
        with self._transaction() as conn:
            conn.execute(self._q["expire"], {"now": self.clock.now()})
            params = {"queue": queue, "state": code, "before": before}
            # Done messages go by when they were settled, the others by when enqueued.
            name = "purge_done" if state == "done" else "purge"
            return conn.execute(self._q[name], params).rowcount

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

    def next_due(self, queue: str) -> float | None:
        # Asked right after an empty claim, whose statement answered it already.
        answer, self._due.answer = getattr(self._due, "answer", None), None
        if answer is not None and answer[0] == queue:
            return None if answer[1] is None else float(answer[1])
        rows = self._one("next_due", {"queue": queue, "now": self.clock.now()})
        value = first(rows)
        return None if value is None else float(value)

    def waiting(self, wanted: bool) -> None:
        """Nothing: LISTEN goes on either way (its notifications cost nothing unread)."""

    def change_token(self) -> int:
        # Never polled (polled_for_changes is False): news arrives through on_change.
        return 0


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
    # Nor sequential scans where an index serves (a table without one still gets its
    # scan): a generic plan is made once, from the statistics of the time, and the
    # partition new messages go to grows under it. Planned while it held a few hundred
    # rows, `id = ANY(...)` scanned it whole, and went on doing so at 50,000 rows, 30 ms
    # a batch of rules instead of 1; the index path costs the same at any size.
    # postgres_maintenance.refresh_statistics keeps the partition's statistics in step,
    # so the planner also picks the right index.
    conn.execute("SET enable_seqscan = off")


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
