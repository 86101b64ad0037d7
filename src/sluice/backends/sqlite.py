"""The SQLite backend: queues in one database file, shared by threads and processes.

One connection per backend behind a lock; every unit of work is one
``BEGIN IMMEDIATE`` transaction, so processes sharing the file serialise on
SQLite's write lock (WAL lets readers carry on) and wait up to ``busy_timeout``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from sluice import sql
from sluice.backends.base import (
    MESSAGE_COLUMNS,
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
    Unchanged,
    browse_params,
    isolation_in_use,
    queue_in_use,
    run_steps,
    sink_host,
    sink_seen,
    stream_host,
)
from sluice.backends.group_commit import GroupCommitter
from sluice.backends.selection import compile_selection
from sluice.backends.sqlite_file import APPLICATION_ID, check_header, check_owner, migrate
from sluice.backends.sqlite_settings import SQLiteSettings, Synchronous
from sluice.catalog import QueueSpec, spec_from_row, spec_params
from sluice.errors import (
    ConfigurationError,
    Conflict,
    LeaseLost,
    NotASluiceDatabase,
    QueueExists,
    QueueNotFound,
    SluiceError,
    StorageError,
)
from sluice.expr.sqlite import SQLiteCompiler, register_functions

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["APPLICATION_ID", "SQLiteBackend", "SQLiteSettings", "Synchronous"]


_UNCHANGED: AbstractContextManager[None] = nullcontext()

_STATE_NAMES = {0: "pending", 1: "ready", 2: "claimed", 3: "expired", 4: "failed", 5: "ready"}


def _load_queries() -> tuple[dict[str, str], dict[str, sql.Template]]:
    """The statements ready to run, and the templates selections and properties fill."""
    # The schema stores application/json as NULL; rows read back carry it spelled out.
    columns = ", ".join(
        "coalesce(content_type, 'application/json') AS content_type" if c == "content_type" else c
        for c in MESSAGE_COLUMNS
    )
    given = {"message_columns": columns}
    return sql.statements("sqlite", fragments=given), sql.templates("sqlite", fragments=given)


class SQLiteBackend:
    """Queue storage in a SQLite database file (see the module docstring)."""

    dialect = "sqlite"
    polled_for_changes = True

    def __init__(self, path: str, settings: SQLiteSettings | None = None) -> None:
        self.path = path
        self.settings = settings or SQLiteSettings()
        self._q, self._templates = _load_queries()
        self._selections: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        self._syncs_at_commit = self.settings.synchronous in ("FULL", "EXTRA")
        # Grouping only pays where a commit waits for an fsync.
        self._group = (
            GroupCommitter(self.commit_many)
            if self._syncs_at_commit and self.settings.group_commit
            else None
        )
        self._lock = threading.RLock()
        self._conn = self._open()
        self._closed = False

    # --- opening ---------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.settings.busy_timeout,
        )

    def _open(self) -> sqlite3.Connection:
        check_header(self.path)
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            raise StorageError(f"{self.path} cannot be opened: {exc}") from exc
        try:
            # Check before anything writes: a foreign file must be left byte for byte as it was.
            check_owner(conn, self.path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.settings.synchronous}")
            conn.execute(f"PRAGMA cache_size=-{self.settings.cache_mib * 1024}")
            migrate(conn, self.path)
            register_functions(conn)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise NotASluiceDatabase(
                    f"{self.path} cannot be opened as a sluice database ({exc})"
                ) from exc
            raise
        return conn

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    # --- the unit of work ------------------------------------------------------------
    @contextmanager
    def _write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction; driver errors become StorageError."""
        with self._lock, self._durability(durable):
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _translate(exc, self.path) from exc
                raise

    def _single(
        self, statement: str, params: Any, *, durable: bool = True
    ) -> tuple[list[Row], int]:
        """Run one statement as its own transaction: (rows, rowcount).

        Saves the BEGIN and COMMIT round trips on the hot paths. A write that
        starts as a read may meet SQLITE_BUSY without waiting (another
        connection wrote in between); being one atomic statement it changed
        nothing then, and is retried inside BEGIN IMMEDIATE, which waits its turn.
        """
        with self._lock:
            if durable or not self._syncs_at_commit:  # the hot path: no context manager
                return self._run_single(statement, params)
            with self._relaxed():
                return self._run_single(statement, params)

    def _run_single(self, statement: str, params: Any) -> tuple[list[Row], int]:
        conn = self._conn
        try:
            try:
                cur = conn.execute(statement, params)
                return cur.fetchall(), cur.rowcount
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
            conn.execute("BEGIN IMMEDIATE")
            try:
                cur = conn.execute(statement, params)
                rows = cur.fetchall()
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return rows, cur.rowcount
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc

    def _durability(self, durable: bool) -> AbstractContextManager[None]:
        """A commit that need not survive power loss skips the fsync.

        That is NORMAL in WAL mode, never OFF: the commit may run a checkpoint,
        and a checkpoint without its syncs could lose earlier, durable commits.
        Later fsyncs cover these commits too, since the WAL is written in order.
        """
        if durable or not self._syncs_at_commit:
            return _UNCHANGED  # the hot path: no generator to set up
        return self._relaxed()

    @contextmanager
    def _relaxed(self) -> Iterator[None]:
        self._conn.execute("PRAGMA synchronous=NORMAL")
        try:
            yield
        finally:
            self._conn.execute(f"PRAGMA synchronous={self.settings.synchronous}")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc

    # --- sessions and recovery -------------------------------------------------------
    def open_session(self, host: str, pid: int, lease: float) -> int:
        with self._write() as conn:
            cur = conn.execute(
                self._q["open_session"],
                {"host": host, "pid": pid, "now": time.time(), "lease": lease},
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

    def heartbeat(self, session: int) -> bool:
        # Not durable: a heartbeat lost to a power cut matters to nobody.
        with self._write(durable=False) as conn:
            cur = conn.execute(self._q["heartbeat"], {"session": session, "now": time.time()})
            return cur.rowcount == 1

    def close_session(self, session: int) -> None:
        self._close_sessions("close_session", {"session": session})

    def _close_sessions(self, name: str, params: Mapping[str, Any]) -> None:
        """Delete sessions by the named statement and roll back what they held."""
        with self._write() as conn:
            conn.execute(self._q[name], params)
            self._roll_back_orphans(conn)

    def recover(self, is_dead: Callable[[SessionInfo], bool]) -> list[int]:
        # Not durable: undone by a power cut, it is simply done again after it.
        with self._write(durable=False) as conn:
            sessions = [SessionInfo(*r) for r in conn.execute(self._q["list_sessions"])]
            dead = [s.id for s in sessions if is_dead(s)]
            for session in dead:
                conn.execute(self._q["close_session"], {"session": session})
            self._roll_back_orphans(conn)
            self._expire(conn)
            return dead

    def _roll_back_orphans(self, conn: sqlite3.Connection) -> None:
        # Whatever a session no longer registered holds is rolled back here, so a
        # session recovered while it still worked cannot leave claims behind.
        lanes = [tuple(r) for r in conn.execute(self._q["dead_sessions_lanes"])]
        for name in (
            "dead_sessions_pending",
            "dead_sessions_own_claims",
            "dead_sessions_dead_letter",
            "dead_sessions_release",
        ):
            conn.execute(self._q[name])
        self._promote(conn, lanes)

    def _expire(self, conn: sqlite3.Connection) -> None:
        """Expire overdue messages; a lane whose head expired gets the next as head."""
        now = {"now": time.time()}
        lanes = [tuple(r) for r in conn.execute(self._q["expiring_lanes"], now)]
        conn.execute(self._q["expire"], now)
        self._promote(conn, lanes)

    # --- catalog ---------------------------------------------------------------------
    def create_queue(self, spec: QueueSpec) -> None:
        try:
            with self._write() as conn:
                conn.execute(self._q["insert_queue"], spec_params(spec) | {"now": time.time()})
        except StorageError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                raise QueueExists(f"queue {spec.name!r} exists already") from exc.__cause__
            raise

    def alter_queue(self, spec: QueueSpec) -> None:
        with self._write() as conn:
            if conn.execute(self._q["update_queue"], spec_params(spec)).rowcount == 0:
                if conn.execute(self._q["get_queue"], {"name": spec.name}).fetchone():
                    raise isolation_in_use(spec.name)
                raise QueueNotFound(f"queue {spec.name!r} does not exist")

    def drop_queue(self, name: str) -> None:
        with self._write() as conn:
            users = [r[0] for r in conn.execute(self._q["queues_referencing"], {"name": name})]
            if users:
                raise queue_in_use(name, error_queue_of=users)
            busy = conn.execute(self._q["queue_in_flight"], {"name": name}).fetchone()[0]
            if busy:
                raise queue_in_use(name, busy=busy)
            for (session,) in conn.execute(self._q["streams_of_queue"], {"name": name}).fetchall():
                conn.execute(self._q["stream_delete"], {"session": session})
                conn.execute(self._q["close_session"], {"session": session})
            conn.execute(self._q["delete_queue_messages"], {"name": name})
            conn.execute(self._q["delete_queue_properties"], {"name": name})
            if conn.execute(self._q["delete_queue"], {"name": name}).rowcount == 0:
                raise QueueNotFound(f"queue {name!r} does not exist")

    def get_queue(self, name: str) -> QueueSpec | None:
        with self._read() as conn:
            row = conn.execute(self._q["get_queue"], {"name": name}).fetchone()
        return spec_from_row(row) if row else None

    def list_queues(self) -> list[QueueSpec]:
        with self._read() as conn:
            return [spec_from_row(r) for r in conn.execute(self._q["list_queues"])]

    def create_type(self, name: str, kind: str, definition: str) -> None:
        params = {"name": name, "kind": kind, "definition": definition, "now": time.time()}
        try:
            with self._write() as conn:
                conn.execute(self._q["insert_type"], params)
        except StorageError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                raise ConfigurationError(f"message type {name!r} exists already") from None
            raise

    def message_types(self) -> dict[str, tuple[str, str]]:
        with self._read() as conn:
            return {n: (k, d) for n, k, d in conn.execute(self._q["list_types"])}

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
            with self._write() as conn:
                conn.execute(self._q["insert_property"], params)
                for queue, (slot, value, value_params) in fills.items():
                    if indexed:
                        conn.execute(self._q[f"slot_index_{slot}"])
                    link = {"queue": queue, "name": name, "slot": slot}
                    if conn.execute(self._q["insert_queue_property"], link).rowcount != 1:
                        raise _queue_not_found([queue])
                    # Messages already queued get the value too: one statement per queue.
                    fill = self._templates[f"property_fill_{slot}"].fill(value=value)
                    conn.execute(fill, value_params | {"queue": queue})
        except StorageError as exc:
            if isinstance(exc.__cause__, sqlite3.IntegrityError):
                raise ConfigurationError(
                    f"property {name!r} exists already, or a queue has no free {type} slot"
                ) from None
            raise

    def queue_properties(self, queue: str) -> list[PropertyDef]:
        with self._read() as conn:
            rows = conn.execute(self._q["queue_properties"], {"queue": queue}).fetchall()
        return [PropertyDef(*r) for r in rows]

    def expression_compiler(self) -> SQLiteCompiler:
        """A compiler of expressions for this database's SQL."""
        return SQLiteCompiler()

    def _selected(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]:
        """A query shaped by a selection, and the selection's parameters (cached)."""
        if select is None:
            return self._q[name], {}
        cached = self._selections.get((name, select.key))
        if cached is None:
            where, order, params = compile_selection(select, SQLiteCompiler)
            cached = self._templates[name].fill(select=where, order=order), params
            if len(self._selections) > 256:  # selections come from code: a few, reused
                self._selections.clear()
            self._selections[(name, select.key)] = cached
        return cached

    # --- messages --------------------------------------------------------------------
    def append(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> None:
        with self._write(durable=durable) as conn:
            self._insert(conn, session, tx, envelopes, state=1 if ready else 0)

    def _insert(
        self,
        conn: sqlite3.Connection,
        session: int,
        tx: int,
        envelopes: Sequence[Envelope],
        state: int,
    ) -> None:
        # Queue ids are looked up once per transaction, not once per row.
        names = {e.queue for e in envelopes}
        ids = dict(conn.execute(self._q["queue_ids"]).fetchall())
        if not names <= ids.keys():
            raise _queue_not_found(sorted(names - ids.keys()))
        if not any(map(_typed, envelopes)):
            rows = [(state, session, tx, ids[e.queue], *e[1:11]) for e in envelopes]
            conn.executemany(self._q["insert_message_values"], rows)
            return
        typed = [
            (state, session, tx, ids[e.queue], *e[1:11], e.type, *(e.keys or _NO_KEYS),
             e.group, e.lane)
            for e in envelopes
        ]  # fmt: skip
        conn.executemany(self._q["insert_typed_values"], typed)

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
        # Claims commit without fsync. A claim is not state worth a disk flush: a
        # power cut that undid it also killed its session, whose claims recovery
        # would give back anyway; and the next durable commit's fsync covers it.
        params = {"session": session, "tx": tx, "queue": queue, "limit": limit, "now": time.time()}
        if limit == 1 and not lanes:
            # One statement, run without BEGIN/COMMIT; a scalar subquery picks the row.
            query, extra = self._selected("claim_with_own_one" if own else "claim_one", select)
            rows, _ = self._single(query, params | extra if extra else params, durable=False)
            return rows
        name = "select_claimable_with_own" if own else "select_claimable"
        rows = []
        owned = set(lanes)
        with self._write(durable=False) as conn:
            # Of a lane only the head is claimable, or the next message for the lane's
            # holder: each round takes what is claimable now, and lanes it took from
            # offer their next message to the following round.
            while len(rows) < limit:
                params["limit"] = limit - len(rows)
                query, extra = self._selected(f"{name}_lanes" if owned else name, select)
                if owned:
                    # A lane's run is taken whole; with a selection only its next
                    # message, the one the selection may judge without skipping any.
                    run = 1 if select is not None else params["limit"]
                    extra = extra | {
                        "lanes": json.dumps(sorted(owned)),
                        "run": run,
                        "fill": int(fill or not lanes),
                    }
                taken = conn.execute(query, params | extra).fetchall()
                if not taken:
                    break
                params["ids"] = _ids([row[0] for row in taken])
                conn.execute(self._q["mark_claimed"], params)
                rows += taken
                more = {r[19] for r in taken if r[19] is not None and not _own(r, session, tx)}
                if not more:
                    break  # no lane took part: this round took all there was
                owned |= more
        # Rows come back as they were selected; the state column says what they are now.
        return [(r[0], 2, *r[2:]) for r in rows]

    def release(
        self, session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None:
        params = {"session": session, "tx": tx, "ids": _ids(refs)}
        with self._write(durable=False) as conn:
            conn.execute(self._q["dead_letter"], params)
            conn.execute(self._q["release"], params)
            self._promote(conn, lanes)

    def _promote(self, conn: sqlite3.Connection, lanes: Sequence[Lane] | set[Lane]) -> None:
        """Give each of ``lanes`` its head, if it has none (see the promote query)."""
        if lanes:
            conn.execute(self._q["promote"], {"lanes": json.dumps(sorted(lanes))})

    def lane_fronts(self, queue: str, lanes: Sequence[str]) -> dict[str, tuple[int, int]]:
        fronts: dict[str, tuple[int, int]] = {}
        with self._read() as conn:
            for lane in lanes:
                row = conn.execute(self._q["lane_front"], {"queue": queue, "lane": lane}).fetchone()
                if row is not None:
                    fronts[lane] = (row[0], row[1])
        return fronts

    def commit(self, plan: CommitPlan) -> None:
        if plan.durable and self._group is not None:
            self._group.commit(plan)
        else:
            self._commit_alone(plan)

    def _commit_alone(self, plan: CommitPlan) -> None:
        key: dict[str, object] = {"session": plan.session, "tx": plan.tx}
        if plan.effects:
            with self._write(durable=plan.durable) as conn:
                self._apply(conn, plan)
            return
        if plan.held and not (plan.rejects or plan.pending or plan.enqueues or plan.lanes):
            # The common acknowledgement: one statement. Recovery releases all of a
            # session's claims at once, so it matches all held rows or none.
            name, params = _delete_held(key, plan.held)
            _, settled = self._single(self._q[name], params, durable=plan.durable)
            if settled != len(plan.held):
                raise _lease_lost(plan)
            return
        if len(plan.enqueues) == 1 and not (plan.held or plan.pending or _typed(plan.enqueues[0])):
            (envelope,) = plan.enqueues
            row = (1, plan.session, plan.tx, *envelope[:11])
            _, inserted = self._single(self._q["insert_message"], row, durable=plan.durable)
            if inserted != 1:
                raise _queue_not_found([envelope.queue])
            return
        with self._write(durable=plan.durable) as conn:
            self._apply(conn, plan)

    def commit_many(self, plans: Sequence[CommitPlan]) -> list[BaseException | None]:
        """Commit several plans in one database transaction, so with one fsync.

        Each plan gets a savepoint: one that fails (its queue was dropped, its
        lease lost) is undone alone and its error returned in its place; the
        others commit. A database failure fails them all.
        """
        if len(plans) == 1:  # nobody to share the fsync with: the cheapest way
            try:
                self._commit_alone(plans[0])
            except SluiceError as exc:
                return [exc]
            return [None]
        results: list[BaseException | None] = []
        with self._write() as conn:
            for plan in plans:
                conn.execute("SAVEPOINT plan")
                try:
                    self._apply(conn, plan)
                except SluiceError as exc:
                    conn.execute("ROLLBACK TO plan")
                    results.append(exc)
                else:
                    results.append(None)
                conn.execute("RELEASE plan")
        return results

    def _apply(self, conn: sqlite3.Connection, plan: CommitPlan) -> None:
        """The statements of a commit, inside the caller's database transaction."""
        key: dict[str, object] = {"session": plan.session, "tx": plan.tx}
        if plan.held:
            settled = 0
            for ref, reason in plan.rejects.items():
                reject = key | {"id": ref, "reason": reason}
                settled += conn.execute(self._q["reject"], reject).rowcount
            name, held = _delete_held(key, plan.held)
            settled += conn.execute(self._q[name], held).rowcount
            if settled != len(plan.held):
                raise _lease_lost(plan)
        if plan.pending:
            if conn.execute(self._q["publish_pending"], key).rowcount != plan.pending:
                raise _lease_lost(plan)
            conn.execute(self._q["delete_pending"], key)
        if plan.enqueues:
            self._insert(conn, plan.session, plan.tx, plan.enqueues, state=1)
        self._promote(conn, plan.lanes)
        try:
            run_steps(lambda name, params: conn.execute(self._q[name], params).rowcount,
                      plan.effects)  # fmt: skip
        except Unchanged as exc:
            raise Conflict(
                f"{exc}: another transaction changed the row this commit depended on; "
                "nothing was changed"
            ) from None

    def abort(self, session: int, tx: int, held: Sequence[int], lanes: Sequence[Lane] = ()) -> None:
        key = {"session": session, "tx": tx, "ids": _ids(held)}
        with self._write(durable=False) as conn:
            conn.execute(self._q["delete_pending"], key)
            if held:
                for name in ("delete_own_claimed", "dead_letter", "release"):
                    conn.execute(self._q[name], key)
                self._promote(conn, lanes)

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
        query, extra = self._selected("browse", select)
        params = browse_params(queue, state, limit, session, tx) | extra
        with self._read() as conn:
            return conn.execute(query, params).fetchall()

    def purge(self, queue: str, state: str, before: float) -> int:
        code = {"expired": 3, "failed": 4}[state]
        with self._write() as conn:
            self._expire(conn)
            params = {"queue": queue, "state": code, "before": before}
            return conn.execute(self._q["purge"], params).rowcount

    def stats(self, queue: str) -> dict[str, int]:
        counts = dict.fromkeys(("ready", "delayed", "pending", "claimed", "expired", "failed"), 0)
        with self._write(durable=False) as conn:  # expiring is redone if a power cut undoes it
            self._expire(conn)
            for state, delayed, n in conn.execute(
                self._q["stats"], {"queue": queue, "now": time.time()}
            ):
                name = "delayed" if state in (1, 5) and delayed else _STATE_NAMES[state]
                counts[name] += n
        return counts

    def next_due(self, queue: str) -> float | None:
        with self._read() as conn:
            row = conn.execute(self._q["next_due"], {"queue": queue, "now": time.time()}).fetchone()
        return None if row is None else row[0]

    # --- Spark streams and sinks (sluice.spark) -----------------------------------------
    def open_stream(self, queue: str, name: str) -> StreamState:
        key = {"queue": queue, "name": name, "now": time.time()}
        with self._write() as conn:
            found = conn.execute(self._q["stream_find"], key).fetchone()
            if found is not None:
                return StreamState(*found)
            params = {"host": stream_host(queue, name), "pid": 0, "lease": STREAM_LEASE}
            session = conn.execute(self._q["open_session"], key | params).lastrowid
            if conn.execute(self._q["stream_insert"], key | {"session": session}).rowcount != 1:
                raise QueueNotFound(f"queue {queue!r} does not exist")
            return StreamState(int(session or 0), 0, 0)

    def set_stream_round(self, session: int, round: int) -> None:
        # Durable: its fsync also makes the round's claims (written before it) durable.
        self._single(self._q["stream_set_round"], {"session": session, "round": round})

    def set_stream_acked(self, session: int, acked: int) -> None:
        self._single(self._q["stream_set_acked"], {"session": session, "acked": acked})

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
        with self._read() as conn:
            return conn.execute(
                self._q["stream_held"], params | {"part": part, "parts": parts}
            ).fetchall()

    def stream_spooled(
        self, session: int, after: int, upto: int, *, part: int = 0, parts: int = 1
    ) -> list[pa.Table]:
        return []  # SQLite claims a round in place: an UPDATE is no dearer than a move here

    def stream_held_count(self, session: int, queue: str, after: int, upto: int) -> int:
        params = {"session": session, "queue": queue, "after": after, "upto": upto}
        with self._read() as conn:
            return int(conn.execute(self._q["stream_held_count"], params).fetchone()[0])

    def stream_claim(
        self, session: int, round: int, queue: str, limit: int, select: Selection | None
    ) -> int:
        query, extra = self._selected("stream_claim", select)
        params = {"session": session, "tx": round, "queue": queue, "limit": limit}
        # Without fsync, as every claim: set_stream_round's commit makes it durable.
        with self._write(durable=False) as conn:
            return int(conn.execute(query, params | {"now": time.time()} | extra).rowcount)

    def stream_settle(self, session: int, queue: str, after: int, upto: int) -> None:
        params = {"session": session, "queue": queue, "after": after, "upto": upto}
        with self._write() as conn:
            settled = conn.execute(self._q["stream_settle"], params).fetchall()
            self._promote(conn, {(queue, lane) for (lane,) in settled if lane is not None})
            conn.execute(self._q["stream_set_acked"], {"session": session, "acked": upto})

    def scan(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> list[Row]:
        query, extra = self._selected("scan", select)
        params = browse_params(queue, state, limit, 0, 0) | extra | {"after": after, "upto": upto}
        with self._read() as conn:
            return conn.execute(query, params).fetchall()

    def id_bounds(self, queue: str) -> tuple[int, int, int]:
        with self._read() as conn:
            low, high, count = conn.execute(self._q["id_bounds"], {"queue": queue}).fetchone()
            return (low or 0), (high or 0), count

    def drop_stream(self, queue: str, name: str) -> bool:
        with self._write() as conn:
            found = conn.execute(self._q["stream_find"], {"queue": queue, "name": name}).fetchone()
            if found is None:
                return False
            conn.execute(self._q["stream_delete"], {"session": found[0]})
            conn.execute(self._q["close_session"], {"session": found[0]})
            self._roll_back_orphans(conn)
            return True

    def sink_batch(self, sink: str) -> int | None:
        with self._read() as conn:
            row = conn.execute(self._q["sink_batch"], {"name": sink}).fetchone()
            return None if row is None else int(row[0])

    def forget_sink(self, sink: str) -> None:
        self._single(self._q["sink_forget"], {"name": sink})

    def close_staging(self, host: str, batch: int | None = None) -> None:
        self._close_sessions("staging_close", {"host": host, "pid": batch})

    def publish_staged(
        self, parts: Sequence[StagedPart], sink: str | None = None, batch: int = 0
    ) -> bool:
        with self._write() as conn:
            fresh = True
            if sink is not None:
                last = conn.execute(self._q["sink_batch"], {"name": sink}).fetchone()
                fresh = not sink_seen(sink, batch, None if last is None else int(last[0]))
                if fresh:
                    record = {"name": sink, "batch": batch, "now": time.time()}
                    conn.execute(self._q["sink_record"], record)
            for part in parts if fresh else ():
                plan = CommitPlan(part.session, part.tx, pending=part.rows, lanes=part.lanes)
                self._apply(conn, plan)
                conn.execute(self._q["close_session"], {"session": part.session})
            if sink is not None:
                conn.execute(self._q["sink_orphans"], {"host": sink_host(sink), "batch": batch})
                self._roll_back_orphans(conn)
            return fresh

    # --- jobs (JobsBackend) -----------------------------------------------------------
    def jobs_read(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        with self._read() as conn:
            return conn.execute(self._q[name], params).fetchall()

    def jobs_write(self, steps: Sequence[Effect], *, durable: bool = True) -> bool:
        try:
            with self._write(durable=durable) as conn:
                run_steps(lambda name, params: conn.execute(self._q[name], params).rowcount, steps)
        except Unchanged:
            return False
        return True

    def on_change(self, callback: Callable[[str | None], None]) -> None:
        """Nothing to subscribe to: waiters poll ``change_token`` (PRAGMA data_version)."""

    def change_token(self) -> int:
        with self._read() as conn:
            value: int = conn.execute("PRAGMA data_version").fetchone()[0]
            return value


_NO_KEYS = (None,) * 8


def _typed(envelope: Envelope) -> bool:
    """Whether the envelope needs the full insert (a type, properties, a group or lane)."""
    return (
        envelope.type is not None
        or envelope.keys is not None
        or envelope.group is not None
        or envelope.lane is not None
    )


def _own(row: Row, session: int, tx: int) -> bool:
    return bool(row[3] == session and row[4] == tx)


def _delete_held(key: dict[str, object], held: Sequence[int]) -> tuple[str, dict[str, object]]:
    """The query that deletes a transaction's held messages, and its parameters."""
    if len(held) == 1:  # by id: json_each costs a tenth of a cycle for one message
        return "delete_claimed_one", key | {"id": held[0]}
    return "delete_claimed", key | {"ids": _ids(held)}


def _ids(refs: Sequence[int]) -> str:
    # Bound as one JSON array and expanded by json_each: one statement for any count.
    return "[" + ",".join(map(str, refs)) + "]"


def _queue_not_found(names: Sequence[str]) -> QueueNotFound:
    return QueueNotFound(f"queue {', '.join(map(repr, names))} does not exist")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in (
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
    )


def _lease_lost(plan: CommitPlan) -> LeaseLost:
    return LeaseLost(
        f"transaction {plan.session}/{plan.tx} was rolled back because its session's lease "
        "expired (the process stalled or lost the database); nothing of it was committed"
    )


def _translate(exc: sqlite3.Error, path: str) -> StorageError:
    text = str(exc)
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in text:
        return StorageError("the database connection is closed; call sluice.connect again")
    if "locked" in text or "busy" in text:
        return StorageError(
            f"{path} stayed locked by another connection past busy_timeout ({text}); "
            "retry, or raise busy_timeout"
        )
    return StorageError(f"SQLite failed on {path}: {text}")
