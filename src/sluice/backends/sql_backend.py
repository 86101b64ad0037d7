"""What the SQL backends share: the catalog, sessions' rollback, jobs statements, sinks.

Both dialects run the same orchestration over named statements, each on a
DB-API style connection (``execute`` returning a cursor); a dialect module
supplies its units of work, its way of promoting lanes and whatever it keeps
beside the messages (PostgreSQL's stream spool). What differs between SQLite
and PostgreSQL lives in their own modules, never here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

from sluice.backends.records import (
    COUNTED_STATES,
    Duplicate,
    Effect,
    Lane,
    PropertyDef,
    QueueCounts,
    Row,
    Selection,
    StoredProperty,
    Unchanged,
    isolation_in_use,
    queue_in_use,
    run_steps,
)
from sluice.backends.sqs import dedup_owner
from sluice.catalog import QueueSpec, spec_from_row, spec_params
from sluice.clock import Clock
from sluice.errors import ConfigurationError, QueueExists, QueueInUse, QueueNotFound
from sluice.message import MessageState
from sluice.sql import Template

__all__ = [
    "PURGEABLE",
    "SqlBackend",
    "SqlConnection",
    "SqlCursor",
    "purge_statement",
    "queue_counts",
    "state_counts",
]

_STATE_NAMES = MessageState.names()

PURGEABLE = {
    "expired": MessageState.EXPIRED,
    "failed": MessageState.FAILED,
    "done": MessageState.DONE,
}
"""The kept states ``purge`` deletes from, by the name the caller gives."""


def purge_statement(
    queries: Mapping[str, str], queue: str, state: str, before: float
) -> tuple[str, dict[str, Any]]:
    """The SQL ``purge`` runs for ``state`` (of the backend's ``queries``), and its
    parameters.

    Ready messages go whatever their age: keeping a lane's newer ones while its older
    head went would leave them behind nobody. Done ones go by when they were settled,
    the kept others by when they were enqueued.
    """
    if state == "ready":
        return queries["purge_ready"], {"queue": queue}
    params = {"queue": queue, "state": PURGEABLE[state], "before": before}
    return queries["purge_done" if state == "done" else "purge"], params


class SqlCursor(Protocol):
    """The part of a DB-API cursor the shared code uses (sqlite3's and psycopg's)."""

    @property
    def rowcount(self) -> int: ...

    def fetchall(self) -> list[Any]: ...

    def fetchone(self) -> Any: ...


class SqlConnection(Protocol):
    """The part of a DB-API connection the shared code uses (sqlite3's and psycopg's)."""

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...


class SqlBackend(ABC):
    """The orchestration both SQL backends share, over their named statements ``_q``."""

    _q: dict[str, str]
    _templates: dict[str, Template]
    clock: Clock

    def one_turn(self) -> AbstractContextManager[Any]:
        """Nothing by default: each call takes its own connection (``Turns``)."""
        return nullcontext()

    # --- what a dialect provides ------------------------------------------------------
    @abstractmethod
    def _transaction(self, *, durable: bool = True) -> AbstractContextManager[SqlConnection]:
        """One database transaction; driver errors leave it as translated StorageErrors."""

    @abstractmethod
    def _read_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        """Run one read-only statement on its own; its rows."""

    @abstractmethod
    def _write_rows(self, name: str, params: Mapping[str, Any], *, durable: bool = True) -> int:
        """Run one writing statement as its own transaction; the rows it changed."""

    @abstractmethod
    def _promote(self, conn: SqlConnection, lanes: Sequence[Lane]) -> None:
        """Give each of ``lanes`` its head, if it has none (the promote statement)."""

    @abstractmethod
    def _release_orphans(self, conn: SqlConnection) -> list[Lane]:
        """Roll back what unregistered sessions hold; the lanes whose messages it released
        (to be promoted)."""

    @abstractmethod
    def _drop_stream_rows(self, conn: SqlConnection, session: int) -> None:
        """Forget what a stream keeps beside the messages (PostgreSQL's spool)."""

    @abstractmethod
    def _sessions_closed(self) -> None:
        """Sessions were rolled back: messages may have become available (wake-ups)."""

    @abstractmethod
    def _selection(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]:
        """The text of the named statement shaped by ``select``, and its parameters."""

    @abstractmethod
    def _made_available(self, queues: set[str]) -> None:
        """Messages of ``queues`` became available outside a queue transaction's commit
        (a resume, a retry of failed messages): other processes' waiters should look
        (PostgreSQL notifies; SQLite's see the WAL)."""

    # --- failed messages --------------------------------------------------------------
    def retry_failed(
        self,
        queue: str,
        *,
        select: Selection | None,
        ref: int | None,
        allowed: Callable[[str], bool],
    ) -> tuple[dict[str, int], dict[str, int]]:
        found, key = self._selection("failed_origins", select)
        retry, _ = self._selection("retry_failed", select)
        params = {"queue": queue, "ref": ref} | key
        moved: dict[str, int] = {}
        with self._transaction() as conn:
            origins = dict(conn.execute(found, params).fetchall())
            for origin in sorted(origins):
                # Into a queue or subscription that still exists; a topic takes nothing
                # back (it never hands out a message to fail).
                row = conn.execute(self._q["get_queue"], {"name": origin}).fetchone()
                if row is not None and spec_from_row(row).kind != "topic" and allowed(origin):
                    n = conn.execute(retry, params | {"origin": origin}).rowcount
                    if n:
                        moved[origin] = n
        left = {o: n - moved.get(o, 0) for o, n in origins.items() if n > moved.get(o, 0)}
        if moved:
            self._made_available(set(moved))
        return moved, left

    def discard_failed(self, queue: str, *, select: Selection | None, ref: int | None) -> int:
        text, key = self._selection("discard_failed", select)
        with self._transaction() as conn:
            return int(conn.execute(text, {"queue": queue, "ref": ref} | key).rowcount)

    # --- sessions ---------------------------------------------------------------------
    def close_session(self, session: int) -> None:
        self._close_sessions("close_session", {"session": session})

    def close_staging(self, host: str, batch: int | None = None) -> None:
        self._close_sessions("staging_close", {"host": host, "pid": batch})

    def _close_sessions(self, name: str, params: Mapping[str, Any]) -> None:
        """Delete sessions by the named statement and roll back what they held."""
        with self._transaction() as conn:
            conn.execute(self._q[name], params)
            self._roll_back_orphans(conn)
        self._sessions_closed()

    def _roll_back_orphans(self, conn: SqlConnection) -> None:
        # Whatever a session no longer registered holds is rolled back here, so a
        # session recovered while it still worked cannot leave claims behind.
        lanes = self._release_orphans(conn)
        if lanes:
            self._promote(conn, lanes)

    # --- catalog ----------------------------------------------------------------------
    def create_queue(
        self, spec: QueueSpec, *, pointer: int | None = None, owner_session: int | None = None
    ) -> None:
        params = spec_params(spec) | {
            "now": self.clock.now(),
            "pointer": pointer,
            "owner_session": owner_session,
        }
        try:
            with self._transaction() as conn:
                if not conn.execute(self._q["insert_queue"], params).rowcount:
                    raise QueueNotFound(f"topic {spec.topic!r} does not exist")
                if spec.topic is not None:
                    link = {"subscription": spec.name, "topic": spec.topic}
                    conn.execute(self._q["copy_queue_properties"], link)
        except Duplicate:
            raise QueueExists(f"queue {spec.name!r} exists already") from None

    def alter_queue(self, spec: QueueSpec) -> None:
        with self._transaction() as conn:
            if conn.execute(self._q["update_queue"], spec_params(spec)).rowcount == 0:
                if conn.execute(self._q["get_queue"], {"name": spec.name}).fetchall():
                    raise isolation_in_use(spec.name)
                raise QueueNotFound(f"queue {spec.name!r} does not exist")

    def set_paused(self, name: str, paused: bool) -> None:
        if not self._write_rows("set_paused", {"name": name, "paused": paused}):
            raise QueueNotFound(f"queue {name!r} does not exist")
        if not paused:
            self._made_available({name})

    def drop_queue(self, name: str) -> None:
        params = {"name": name}
        with self._transaction() as conn:
            if not conn.execute(self._q["lock_queue_row"], params).fetchall():
                raise QueueNotFound(f"queue {name!r} does not exist")
            referencing = conn.execute(self._q["queues_referencing"], params).fetchall()
            users = [user for (user,) in referencing]
            if users:
                raise queue_in_use(name, error_queue_of=users)
            subscribers = conn.execute(self._q["subscriptions_of"], params).fetchall()
            if subscribers:
                raise QueueInUse(
                    f"topic {name!r} has subscriptions "
                    f"{', '.join(repr(s) for (s,) in subscribers)}; unsubscribe them first"
                )
            busy = conn.execute(self._q["queue_in_flight"], params).fetchone()[0]
            if busy:
                raise queue_in_use(name, busy=busy)
            for (session,) in conn.execute(self._q["streams_of_queue"], params).fetchall():
                self._drop_stream_rows(conn, session)
                conn.execute(self._q["stream_delete"], {"session": session})
                conn.execute(self._q["close_session"], {"session": session})
            for statement in (
                "delete_queue_messages",
                "delete_queue_properties",
                "delete_queue_stored_properties",
                "delete_queue",
                # What the SQS endpoint keeps of it (sluice.server.sqs): a queue made again
                # under its name, through SQS or not, starts with SQS's defaults.
                "sqs_queue_forget",
            ):
                conn.execute(self._q[statement], params)
            conn.execute(self._q["sqs_dedup_forget"], {"owner": dedup_owner(name)})

    def get_queue(self, name: str) -> QueueSpec | None:
        rows = self._read_rows("get_queue", {"name": name})
        return spec_from_row(rows[0]) if rows else None

    def list_queues(self) -> list[QueueSpec]:
        return [spec_from_row(r) for r in self._read_rows("list_queues", {})]

    def create_type(self, name: str, kind: str, definition: str) -> None:
        params = {"name": name, "kind": kind, "definition": definition, "now": self.clock.now()}
        try:
            self._write_rows("insert_type", params)
        except Duplicate:
            raise ConfigurationError(f"message type {name!r} exists already") from None

    def message_types(self) -> dict[str, tuple[str, str]]:
        return {n: (k, d) for n, k, d in self._read_rows("list_types", {})}

    def create_property(
        self,
        name: str,
        expression: str,
        type: str,
        fills: Mapping[str, tuple[str, str, Any]],
        *,
        indexed: bool = True,
    ) -> None:
        params = {"name": name, "expression": expression, "type": type, "now": self.clock.now()}
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
        except Duplicate:
            raise ConfigurationError(
                f"property {name!r} exists already, or a queue has no free {type} slot"
            ) from None

    def queue_properties(self, queue: str) -> list[PropertyDef]:
        return [PropertyDef(*r) for r in self._read_rows("queue_properties", {"queue": queue})]

    def stored_properties(self, queue: str) -> list[StoredProperty]:
        rows = self._read_rows("stored_properties", {"queue": queue})
        return [
            StoredProperty(name, kind, expression, bool(fixed))
            for name, kind, expression, fixed in rows
        ]

    def set_stored_properties(self, queue: str, properties: Sequence[StoredProperty]) -> None:
        with self._transaction() as conn:
            if not conn.execute(self._q["lock_queue_row"], {"name": queue}).fetchall():
                raise QueueNotFound(f"queue {queue!r} does not exist")
            conn.execute(self._q["delete_stored_properties"], {"queue": queue})
            for p in properties:
                params = {"queue": queue, "name": p.name, "type": p.type,
                          "expression": p.expression, "fixed": p.fixed}  # fmt: skip
                conn.execute(self._q["insert_stored_property"], params)

    # --- Spark streams and sinks: the parts both dialects keep alike ------------------
    def set_stream_round(self, session: int, round: int) -> None:
        # Durable: its flush also makes the round's claims (written before it) durable.
        self._write_rows("stream_set_round", {"session": session, "round": round})

    def set_stream_acked(self, session: int, acked: int) -> None:
        self._write_rows("stream_set_acked", {"session": session, "acked": acked})

    def stream_held_count(self, session: int, queue: str, after: int, upto: int) -> int:
        params = {"session": session, "queue": queue, "after": after, "upto": upto}
        return int(self._read_rows("stream_held_count", params)[0][0])

    def id_bounds(self, queue: str) -> tuple[int, int, int]:
        low, high, count = self._read_rows("id_bounds", {"queue": queue})[0]
        return (low or 0), (high or 0), int(count)

    def sink_batch(self, sink: str) -> int | None:
        rows = self._read_rows("sink_batch", {"name": sink})
        return int(rows[0][0]) if rows else None

    def forget_sink(self, sink: str) -> None:
        self._write_rows("sink_forget", {"name": sink})

    # --- jobs (JobsStatements) --------------------------------------------------------
    def jobs_read(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        return self._read_rows(name, params)

    def jobs_write(self, steps: Sequence[Effect], *, durable: bool = True) -> bool:
        try:
            with self._transaction(durable=durable) as conn:
                run_steps(lambda name, params: conn.execute(self._q[name], params).rowcount, steps)
        except Unchanged:
            return False
        return True


def state_counts(rows: Sequence[Row]) -> dict[str, int]:
    """``stats()`` from the stats statement's (state, delayed, count) rows."""
    counts = dict.fromkeys(COUNTED_STATES, 0)
    for state, delayed, n in rows:
        name = _STATE_NAMES[state]
        counts["delayed" if name == "ready" and delayed else name] += n
    return counts


def queue_counts(rows: Sequence[Row]) -> dict[str, QueueCounts]:
    """``stats_all()`` from the queue_gauges statement's (queue, state, delayed, count,
    earliest available_at) rows."""
    counts: dict[str, dict[str, int]] = {}
    oldest: dict[str, float] = {}
    for queue, state, delayed, n, earliest in rows:
        name = _STATE_NAMES[state]
        ready = name == "ready" and not delayed
        into = counts.setdefault(queue, dict.fromkeys(COUNTED_STATES, 0))
        into["delayed" if name == "ready" and delayed else name] += int(n)
        if ready:  # READY and WAITING rows are both ready: the earlier of the two
            oldest[queue] = min(oldest.get(queue, float(earliest)), float(earliest))
    return {queue: QueueCounts(c, oldest.get(queue)) for queue, c in counts.items()}
