"""The SQLite backend: queues in one database file, shared by threads and processes.

One connection per backend behind a lock; every unit of work is one
``BEGIN IMMEDIATE`` transaction, so processes sharing the file serialise on
SQLite's write lock (WAL lets readers carry on) and wait up to ``busy_timeout``.
This module holds opening the file, the units of work and the queue operations; the
claims (``sqlite_claims``), the rules engine's dialect parts (``sqlite_rules``) and
Spark's streams (``sqlite_streams``) are mixed in.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from sluice.backends.base import Backend, Outbox
from sluice.backends.gateways import SqlGateways
from sluice.backends.group_commit import GroupCommitter
from sluice.backends.idempotency import SqlIdempotency
from sluice.backends.keys import SqlKeys
from sluice.backends.records import (
    CommitPlan,
    Envelope,
    Lane,
    MessageRow,
    QueueCounts,
    Row,
    Selection,
    SessionInfo,
    Unchanged,
    browse_params,
    lease_lost,
    merged_acks,
    message_row,
    plain_ack,
    run_steps,
)
from sluice.backends.selection import compile_selection
from sluice.backends.sql_backend import (
    SqlBackend,
    SqlConnection,
    purge_statement,
    queue_counts,
    state_counts,
)
from sluice.backends.sqlite_claims import SQLiteClaims
from sluice.backends.sqlite_file import APPLICATION_ID, check_header, check_owner, migrate
from sluice.backends.sqlite_notify import Watcher, watch
from sluice.backends.sqlite_rules import SQLiteRules
from sluice.backends.sqlite_settings import SQLiteSettings, Synchronous
from sluice.backends.sqlite_statements import (
    delete_held,
    ids,
    is_busy,
    keep_held,
    load_queries,
    queue_not_found,
    translate,
    typed,
)
from sluice.backends.sqlite_streams import SQLiteStreams
from sluice.backends.sqlite_sync import WalSync, wal_sync
from sluice.backends.sqlite_topics import SqliteTopics
from sluice.backends.sqs import SqlSqs
from sluice.clock import STEP_BACK_HELD, Clock, SystemClock
from sluice.errors import (
    ConfigurationError,
    Conflict,
    NotASluiceDatabase,
    SluiceError,
    StorageError,
)
from sluice.expr.sql import Source
from sluice.expr.sqlite import SQLiteCompiler, register_functions
from sluice.message import MessageState

if TYPE_CHECKING:
    pass

__all__ = ["APPLICATION_ID", "SQLiteBackend", "SQLiteSettings", "Synchronous"]


_UNCHANGED: AbstractContextManager[None] = nullcontext()


class SQLiteBackend(
    SqlBackend,
    SQLiteClaims,
    SQLiteStreams,
    SqliteTopics,
    SQLiteRules,
    SqlKeys,
    SqlIdempotency,
    SqlSqs,
    SqlGateways,
    Backend,
):
    """Queue storage in a SQLite database file (see the module docstring)."""

    dialect = "sqlite"
    polled_for_changes = True  # until on_change starts a Watcher (Linux)
    outbox: Outbox | None = None  # no connection of the caller's to share: SQLite has one writer

    def __init__(
        self, path: str, settings: SQLiteSettings | None = None, *, clock: Clock | None = None
    ) -> None:
        self.path = path
        self.settings = settings or SQLiteSettings()
        self.clock: Clock = clock or SystemClock()
        self._q, self._templates = load_queries()
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
        (mode,) = self._conn.execute("PRAGMA journal_mode").fetchone()
        wal_mode = mode == "wal"  # not in memory (":memory:"): no WAL file there
        # At FULL, plain acknowledgements sync the WAL outside the connection's lock
        # (sqlite_sync); None: every commit syncs inside COMMIT.
        self._wal = (
            wal_sync(self.path, self.settings.synchronous, self.settings.vfs) if wal_mode else None
        )
        # At FULL in WAL mode the connection rests at NORMAL and each durable commit
        # switches to FULL for itself: the claims, acknowledgements and other relaxed
        # writes of a consumer outnumber enqueues, and each switch is two statements.
        # Where it rests, a write that forgot to say its durability would be relaxed;
        # every write goes through _transaction or _single, which are told.
        self._rests_relaxed = wal_mode and self.settings.synchronous == "FULL"
        if self._rests_relaxed:
            self._conn.execute("PRAGMA synchronous=NORMAL")
        self._rest = "NORMAL" if self._rests_relaxed else self.settings.synchronous
        self._closed = False
        if isinstance(self.clock, SystemClock):
            self._hold_for_stamps(self.clock)
        self._watcher: Watcher | None = None

    # --- opening ---------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        vfs = self.settings.vfs
        if vfs is None:
            target, uri = self.path, False
        else:  # only a URI names a VFS; quoted, so a path's "?" or "#" stays the path's
            target, uri = f"file:{quote(self.path)}?vfs={quote(vfs)}", True
        return sqlite3.connect(
            target,
            uri=uri,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.settings.busy_timeout,
        )

    def _open(self) -> sqlite3.Connection:
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            if self.settings.vfs is not None and "no such vfs" in str(exc):
                raise ConfigurationError(
                    f"vfs={self.settings.vfs!r}: no SQLite VFS of that name is registered in "
                    "this process; register it before connecting, or leave vfs out"
                ) from exc
            raise StorageError(f"{self.path} cannot be opened: {exc}") from exc
        try:
            # Check before anything writes: a foreign file must be left byte for byte as it was.
            check_header(conn, self.path)
            check_owner(conn, self.path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.settings.synchronous}")
            conn.execute(f"PRAGMA cache_size=-{self.settings.cache_mib * 1024}")
            migrate(conn, self.path)
            register_functions(conn)
        except BaseException as exc:
            conn.close()
            # A full disk, a lock held too long or an I/O error is the storage failing,
            # not the file being foreign: say so, not "not a sluice database".
            if isinstance(exc, sqlite3.OperationalError):
                raise translate(exc, self.path, closed=False) from exc
            if isinstance(exc, sqlite3.DatabaseError):
                raise NotASluiceDatabase(
                    f"{self.path} cannot be opened as a sluice database ({exc})"
                ) from exc
            raise
        return conn

    def _hold_for_stamps(self, clock: SystemClock) -> None:
        """After the wall clock stepped back, a new process holds still at the newest stamp
        the others made, as they do (sluice.clock): else what they put before the step
        would wait it out here, though put with no delay."""
        (newest,) = self._conn.execute(self._q["newest_stamp"]).fetchone()
        if newest is not None and 0 < newest - time.time() <= STEP_BACK_HELD:
            clock.not_before(newest)

    def close(self) -> None:
        if self._watcher is not None:  # first, and unlocked: it may be waiting for the lock
            self._watcher.close()
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
                if self._wal is not None:
                    self._wal.close()

    def _translate(self, exc: sqlite3.Error) -> StorageError:
        return translate(exc, self.path, closed=self._closed)

    # --- the unit of work ------------------------------------------------------------
    @contextmanager
    def _transaction(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
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
                    raise self._translate(exc) from exc
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
            if durable != self._rests_relaxed or not self._syncs_at_commit:  # the hot path
                return self._run_single(statement, params)
            with self._switched(durable):
                return self._run_single(statement, params)

    def _run_single(self, statement: str, params: Any) -> tuple[list[Row], int]:
        conn = self._conn
        try:
            try:
                cur = conn.execute(statement, params)
                return cur.fetchall(), cur.rowcount
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
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
            raise self._translate(exc) from exc

    def one_turn(self) -> AbstractContextManager[Any]:
        """The connection's lock, held across the block: one turn for several calls."""
        return self._lock

    def _durability(self, durable: bool) -> AbstractContextManager[None]:
        """A commit that need not survive power loss skips the fsync.

        That is NORMAL in WAL mode, never OFF: the commit may run a checkpoint,
        and a checkpoint without its syncs could lose earlier, durable commits.
        Later fsyncs cover these commits too, since the WAL is written in order.
        A durable commit runs at the level asked for (FULL: the WAL synced inside
        COMMIT, before any other connection can see it).
        """
        if durable != self._rests_relaxed or not self._syncs_at_commit:
            return _UNCHANGED  # the hot path: no generator to set up
        return self._switched(durable)

    @contextmanager
    def _switched(self, durable: bool) -> Iterator[None]:
        """From the level the connection rests at to the other one, for one commit."""
        level = self.settings.synchronous if durable else "NORMAL"
        self._conn.execute(f"PRAGMA synchronous={level}")
        try:
            yield
        finally:
            self._conn.execute(f"PRAGMA synchronous={self._rest}")

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc

    def _read_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        with self._reading() as conn:
            return conn.execute(self._q[name], params).fetchall()

    def _write_rows(self, name: str, params: Mapping[str, Any], *, durable: bool = True) -> int:
        return self._single(self._q[name], params, durable=durable)[1]

    def _drop_stream_rows(self, conn: SqlConnection, session: int) -> None:
        """Nothing: SQLite claims a stream's rounds in place."""

    def _sessions_closed(self) -> None:
        """Nothing: waiters in other processes notice the change themselves."""

    # --- sessions and recovery -------------------------------------------------------
    def open_session(self, host: str, pid: int, lease: float) -> int:
        # Heartbeats are on the wall clock, not self.clock, as leases are judged
        # (sluice.engine.lease): a clock a test moves must not kill live sessions.
        with self._transaction() as conn:
            now, mono = time.time(), time.monotonic()
            params = {"host": host, "pid": pid, "now": now, "lease": lease, "mono": mono}
            cur = conn.execute(self._q["open_session"], params)
            assert cur.lastrowid is not None
            return cur.lastrowid

    def heartbeat(self, session: int) -> bool:
        # Not durable: a heartbeat lost to a power cut matters to nobody.
        with self._transaction(durable=False) as conn:
            beat = {"session": session, "now": time.time(), "mono": time.monotonic()}
            cur = conn.execute(self._q["heartbeat"], beat)
            return cur.rowcount == 1

    def recover(self, is_dead: Callable[[SessionInfo], bool], *, wait: bool = True) -> list[int]:
        # Passes take turns on the write lock, whatever ``wait`` says. Not durable:
        # undone by a power cut, it is simply done again after it.
        with self._transaction(durable=False) as conn:
            sessions = [SessionInfo(*r) for r in conn.execute(self._q["list_sessions"])]
            dead = [s.id for s in sessions if is_dead(s)]
            for session in dead:
                conn.execute(self._q["close_session"], {"session": session})
            self._roll_back_orphans(conn)
            self._expire(conn)
            return dead

    def _expire(self, conn: sqlite3.Connection) -> None:
        """Expire overdue messages; a lane whose head expired gets the next as head."""
        now = {"now": self.clock.now()}
        lanes = [tuple(r) for r in conn.execute(self._q["expiring_lanes"], now)]
        conn.execute(self._q["expire"], now)
        self._promote(conn, lanes)

    def expression_compiler(self) -> SQLiteCompiler:
        """A compiler of expressions for this database's SQL."""
        return SQLiteCompiler()

    def _compiler(self, source: Source, prefix: str) -> SQLiteCompiler:
        return SQLiteCompiler(source, prefix=prefix)

    def _selection(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]:
        return self._selected(name, select)

    def _made_available(self, queues: set[str]) -> None:
        pass  # other processes hear of every commit through the WAL (sqlite_notify)

    def _selected(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]:
        """A query shaped by a selection, and the selection's parameters (cached)."""
        if select is None:
            return self._q[name], {}
        cached = self._selections.get((name, select.key))
        if cached is None:
            where, order, params = compile_selection(select, SQLiteCompiler)
            cached = self._templates[name].fill_selection(where, order), params
            if len(self._selections) > 256:  # selections come from code: a few, reused
                self._selections.clear()
            self._selections[(name, select.key)] = cached
        return cached

    # --- messages --------------------------------------------------------------------
    def append(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> None:
        with self._transaction(durable=durable) as conn:
            state = MessageState.READY if ready else MessageState.PENDING
            self._insert(conn, session, tx, envelopes, state=state)

    def _insert(
        self,
        conn: sqlite3.Connection,
        session: int,
        tx: int,
        envelopes: Sequence[Envelope],
        state: MessageState,
    ) -> None:
        # Queue ids are looked up once per transaction, not once per row.
        names = {e.queue for e in envelopes}
        # Bound as a plain int: sqlite3 binds an IntEnum member through its adapter
        # lookup, which costs as much as the rest of the row.
        code = int(state)
        ids = dict(conn.execute(self._q["queue_ids"]).fetchall())
        if not names <= ids.keys():
            raise queue_not_found(sorted(names - ids.keys()))
        if not any(map(typed, envelopes)):
            rows = [(code, session, tx, ids[e.queue], *e[1:11]) for e in envelopes]
            conn.executemany(self._q["insert_message_values"], rows)
            return
        # A ready message with a lane waits behind the lane's head until promoted.
        waiting = int(MessageState.WAITING) if state is MessageState.READY else code
        full = [
            (code if e.lane is None else waiting, session, tx, ids[e.queue], *e[1:11], e.type,
             *(e.keys or _NO_KEYS), e.group, e.lane)
            for e in envelopes
        ]  # fmt: skip
        conn.executemany(self._q["insert_typed_values"], full)

    def release(
        self, session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None:
        params = {"session": session, "tx": tx, "ids": ids(refs)}
        with self._transaction(durable=False) as conn:
            conn.execute(self._q["dead_letter"], params)
            conn.execute(self._q["release"], params)
            self._promote(conn, lanes)

    def _release_orphans(self, conn: SqlConnection) -> list[Lane]:
        # The lanes are read before the statements that release them: nobody writes in
        # between, for this transaction holds the file's one write lock (PostgreSQL's
        # statements return their own lanes instead).
        lanes = [(q, lane) for q, lane in conn.execute(self._q["dead_sessions_lanes"]).fetchall()]
        for name in (
            "dead_sessions_pending",
            "dead_sessions_own_claims",
            "dead_sessions_dead_letter",
            "dead_sessions_release",
        ):
            conn.execute(self._q[name])
        return lanes

    def _promote(self, conn: SqlConnection, lanes: Sequence[Lane] | set[Lane]) -> None:
        """Give each of ``lanes`` its head, if it has none (see the promote query)."""
        if lanes:
            conn.execute(self._q["promote"], {"lanes": json.dumps(sorted(lanes))})

    def lane_fronts(self, queue: str, lanes: Sequence[str]) -> dict[str, tuple[int, int]]:
        fronts: dict[str, tuple[int, int]] = {}
        with self._reading() as conn:
            for lane in lanes:
                row = conn.execute(self._q["lane_front"], {"queue": queue, "lane": lane}).fetchone()
                if row is not None:
                    writer, writer_tx = row
                    fronts[lane] = (writer, writer_tx)
        return fronts

    def commit(self, plan: CommitPlan) -> None:
        if self._wal is not None and plan.durable and plain_ack(plan) and not plan.freed:
            self._ack_then_sync(plan, self._wal)
        elif plan.durable and self._group is not None:
            self._group.commit(plan)
        else:
            self._commit_alone(plan)

    def _ack_then_sync(self, plan: CommitPlan, wal: WalSync) -> None:
        """A plain acknowledgement at FULL: its delete written without SQLite's fsync, which
        this thread then makes once the connection is free (sqlite_sync), so that other
        threads claim meanwhile and the acknowledgements written meanwhile share it."""
        name, params = delete_held({"session": plan.session, "tx": plan.tx}, plan.held)
        with self._lock:  # reentrant: the write and its number in one hold
            _, settled = self._single(self._q[name], params, durable=False)
            written = wal.wrote()
        if settled != len(plan.held):  # nothing was deleted: nothing to sync
            raise lease_lost(plan)
        wal.sync(written)

    def _commit_alone(self, plan: CommitPlan) -> None:
        key: dict[str, object] = {"session": plan.session, "tx": plan.tx}
        if plan.effects:
            with self._transaction(durable=plan.durable) as conn:
                self._apply(conn, plan)
            return
        if plan.held and not (plan.rejects or plan.pending or plan.enqueues or plan.lanes):
            # The common acknowledgement: one statement. Recovery releases all of a
            # session's claims at once, so it matches all held rows or none.
            if not plan.kept:
                name, params = delete_held(key, plan.held)
            elif len(plan.kept) == len(plan.held):  # all of a queue with retention
                name, params = keep_held(key, plan.kept, plan.settled_at)
            else:
                with self._transaction(durable=plan.durable) as conn:
                    self._apply(conn, plan)
                return
            _, settled = self._single(self._q[name], params, durable=plan.durable)
            if settled != len(plan.held):
                raise lease_lost(plan)
            return
        if len(plan.enqueues) == 1 and not (plan.held or plan.pending or typed(plan.enqueues[0])):
            (envelope,) = plan.enqueues
            row = (1, plan.session, plan.tx, *envelope[1:11], envelope.queue)
            _, inserted = self._single(self._q["insert_message"], row, durable=plan.durable)
            if inserted != 1:
                raise queue_not_found([envelope.queue])
            return
        with self._transaction(durable=plan.durable) as conn:
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
        if all(plain_ack(plan) for plan in plans) and self._acks_at_once(plans):
            return [None] * len(plans)
        results: list[BaseException | None] = []
        with self._transaction() as conn:
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

    def _acks_at_once(self, plans: Sequence[CommitPlan]) -> bool:
        """Plain acknowledgements, one statement per transaction number (the messages of
        one ``get_many`` share theirs): whether all committed. If any row was missing
        (a lease lost), nothing was, and the caller commits them one savepoint each."""
        merged = merged_acks(plans)
        try:
            with self._transaction(durable=any(p.durable for p in plans)) as conn:
                settled = 0
                for plan in merged:
                    name, params = delete_held({"session": plan.session, "tx": plan.tx}, plan.held)
                    settled += conn.execute(self._q[name], params).rowcount
                if settled != sum(len(plan.held) for plan in merged):
                    raise _Short
        except _Short:
            return False
        return True

    def _apply(self, conn: sqlite3.Connection, plan: CommitPlan) -> None:
        """The statements of a commit, inside the caller's database transaction."""
        key: dict[str, object] = {"session": plan.session, "tx": plan.tx}
        if plan.held:
            settled = 0
            for ref, reason in plan.rejects.items():
                reject = key | {"id": ref, "reason": reason}
                settled += conn.execute(self._q["reject"], reject).rowcount
            if plan.kept:
                name, kept = keep_held(key, plan.kept, plan.settled_at)
                settled += conn.execute(self._q[name], kept).rowcount
            if len(plan.held) > len(plan.rejects) + len(plan.kept):  # some are deleted
                name, held = delete_held(key, plan.held)
                settled += conn.execute(self._q[name], held).rowcount
            if settled != len(plan.held):
                raise lease_lost(plan)
        if plan.pending:
            if conn.execute(self._q["publish_pending"], key).rowcount != plan.pending:
                raise lease_lost(plan)
            conn.execute(self._q["delete_pending"], key)
        if plan.enqueues:
            self._insert(conn, plan.session, plan.tx, plan.enqueues, state=MessageState.READY)
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
        key = {"session": session, "tx": tx, "ids": ids(held)}
        with self._transaction(durable=False) as conn:
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
        after: tuple[int, int] | None = None,
    ) -> list[MessageRow]:
        # Done messages have a statement of their own: they browse in settle order.
        query, extra = self._selected("browse_done" if state == "done" else "browse", select)
        params = (
            browse_params(queue, state, limit, session, tx, now=self.clock.now(), after=after)
            | extra
        )
        with self._reading() as conn:
            return list(map(message_row, conn.execute(query, params).fetchall()))

    def purge(self, queue: str, state: str, before: float) -> int:
        statement, params = purge_statement(self._q, queue, state, before)
        with self._transaction() as conn:
            self._expire(conn)  # what expired by now stays, as expired: not ready
            return conn.execute(statement, params).rowcount

    def stats(self, queue: str) -> dict[str, int]:
        with self._transaction(
            durable=False
        ) as conn:  # expiring is redone if a power cut undoes it
            self._expire(conn)
            params = {"queue": queue, "now": self.clock.now()}
            return state_counts(conn.execute(self._q["stats"], params).fetchall())

    def stats_all(self) -> dict[str, QueueCounts]:
        with self._transaction(durable=False) as conn:  # as in stats
            self._expire(conn)
            params = {"now": self.clock.now()}
            return queue_counts(conn.execute(self._q["queue_gauges"], params).fetchall())

    def remove_kept(self, limit: int) -> int:
        # Not durable: undone by a power cut, it is simply done again after it.
        params = {"now": self.clock.now(), "limit": limit}
        return self._write_rows("remove_kept", params, durable=False)

    def next_due(self, queue: str) -> float | None:
        with self._reading() as conn:
            row = conn.execute(
                self._q["next_due"], {"queue": queue, "now": self.clock.now()}
            ).fetchone()
        return None if row is None else row[0]

    def on_change(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(None)`` when another connection commits, where the OS tells.

        Linux: a Watcher on the file's directory (sqlite_notify). Elsewhere
        waiters keep polling ``change_token`` (PRAGMA data_version).
        """
        if self._watcher is None:
            self._watcher = watch(self.path, self._connect, self.change_token, callback)
            if self._watcher is not None:
                self.polled_for_changes = False

    def waiting(self, wanted: bool) -> None:
        if self._watcher is not None:
            self._watcher.want(wanted)

    def change_token(self) -> int:
        with self._reading() as conn:
            value: int = conn.execute("PRAGMA data_version").fetchone()[0]
            return value


_NO_KEYS = (None,) * 8
# An envelope's values the insert statements bind after the queue (5th to 14th), in order:
# a run of its fields, taken as the slice e[1:11] (per row, cheaper than naming each).
if Envelope._fields[1:11] != (
    "num", "priority", "body", "content_type", "properties", "correlation_id", "reply_to",
    "enqueued_at", "available_at", "expires_at",
):  # fmt: skip
    raise ImportError("Envelope's fields moved: the SQLite insert binds e[1:11] as num..expires_at")


class _Short(Exception):
    """Fewer rows settled than held: the transaction is rolled back."""
