"""The PostgreSQL backend's Spark streams and sinks: rounds taken into a spool, staged
writes published at once.

A stream's round of a queue without lanes is moved out of the queue (a DELETE
... RETURNING sent as CSV through COPY) into ``stream_spool`` as one Arrow
blob: a Spark task reads it without a Python object per message. Rounds of
queues with lanes are claimed in place by the engine's claim. A position stream
reads by id range and moves its queue's pointer (Streams.stream_span).
"""

from __future__ import annotations

import select
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import psycopg

from sluice.backends.postgres_arrow import ArrowReader
from sluice.backends.postgres_notify import Notifier
from sluice.backends.postgres_statements import (
    Expected,
    commit_statements,
    credit_limit,
    credit_statements,
    first,
    lanes_params,
    message_rows,
)
from sluice.backends.records import (
    READ_COLUMNS,
    STREAM_LEASE,
    CommitPlan,
    HeldRow,
    Reached,
    Row,
    Selection,
    StagedPart,
    StreamState,
    browse_params,
    held_row,
    sink_host,
    sink_seen,
    stream_host,
)
from sluice.backends.stream_positions import NO_CEILING, span_end
from sluice.clock import Clock
from sluice.errors import LeaseLost, QueueNotFound

if TYPE_CHECKING:
    import pyarrow as pa  # sluice-queue[spark]

__all__ = ["PostgresStreams"]


class PostgresStreams:
    """The Streams and Sinks capabilities of ``PostgresBackend`` (mixed into it)."""

    _q: dict[str, str]
    _notifier: Notifier
    clock: Clock

    @abstractmethod
    def _transaction(
        self, *, durable: bool = True
    ) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    @abstractmethod
    def _one(self, name: str, params: Any, *, durable: bool = True) -> list[Row]: ...

    @abstractmethod
    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    @abstractmethod
    def _roll_back_orphans(self, conn: Any) -> None: ...

    @abstractmethod
    def selected(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]: ...

    def open_stream(self, queue: str, name: str) -> StreamState:
        key = {"queue": queue, "name": name}
        found = self._one("stream_find", key)
        if found:
            return StreamState(*found[0])
        params = {"host": stream_host(queue, name), "pid": 0, "lease": STREAM_LEASE}
        with self._transaction() as conn:
            session = first(conn.execute(self._q["open_session"], params).fetchall())
            made = conn.execute(self._q["stream_insert"], key | {"session": session}).fetchall()
            if made:
                return StreamState(int(session), 0, 0)
            conn.execute(self._q["close_session"], {"session": session})
        found = self._one("stream_find", key)
        if not found:
            raise QueueNotFound(f"queue {queue!r} does not exist")
        return StreamState(*found[0])

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
    ) -> list[HeldRow]:
        params = {"session": session, "queue": queue, "after": after, "upto": upto}
        rows = self._one("stream_held", params | {"part": part, "parts": parts})
        held = [HeldRow(*m, r[21]) for m, r in zip(message_rows(rows), rows, strict=True)]
        if spooled:
            from sluice.backends.postgres_spool import spooled_rows  # noqa: PLC0415 (Arrow)

            for table in self.stream_spooled(session, after, upto, part=part, parts=parts):
                held.extend(map(held_row, spooled_rows(table)))
            held.sort(key=lambda r: (r.round, r.id))
        return held

    def stream_spooled(
        self, session: int, after: int, upto: int, *, part: int = 0, parts: int = 1
    ) -> list[pa.Table]:
        spooled = self._one("stream_spool_read", {"session": session, "after": after, "upto": upto})
        if not spooled:
            return []
        from sluice.backends.postgres_spool import readable  # noqa: PLC0415 (sluice-queue[spark])

        return [readable(bytes(data), round_, part, parts) for round_, data in spooled]

    def stream_claim(
        self, session: int, round: int, queue: str, limit: int, select: Selection | None
    ) -> int:
        name, extra = self.selected("stream_take", select)
        params = {"queue": queue, "limit": limit, "now": self.clock.now()} | extra
        from sluice.backends import postgres_spool as spool  # noqa: PLC0415 (Arrow: sluice-queue[spark])

        # Relaxed, as every claim: set_stream_round's flush makes it durable.
        with self._transaction(durable=False) as conn:
            # A round takes no more than a capped queue's credit, under its credit lock
            # as a claim does (an uncapped queue takes no lock; its count is NULL).
            for step, step_params in credit_statements(queue):
                cur = conn.execute(self._q[step], step_params)
            params["limit"] = credit_limit(limit, cur.fetchall())
            if not params["limit"]:
                return 0
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
                conn.execute(self._q["promote"], lanes_params([(queue, k) for k in lanes]))
        if lanes:
            self._notifier.signal([queue])
        return n

    def stream_settle(
        self, session: int, queue: str, after: int, upto: int, *, reached: Reached | None = None
    ) -> None:
        params = {"session": session, "queue": queue, "after": after, "upto": upto}
        lanes: list[str] = []
        with self._transaction() as conn:
            if upto > after:
                found: set[str | None] = set()
                if first(conn.execute(self._q["queue_retention"], params).fetchall()) is not None:
                    # Kept as done (docs/retention.md): in place, and what the spool holds.
                    now = self.clock.now()
                    kept = conn.execute(self._q["stream_keep"], params | {"now": now}).fetchall()
                    found.update(lane for (lane,) in kept)
                    self._keep_spool(conn, params, now)
                found.update(lane for (lane,) in conn.execute(self._q["stream_settle"], params))
                lanes = sorted(lane for lane in found if lane is not None)
                if lanes:
                    conn.execute(self._q["promote"], lanes_params([(queue, k) for k in lanes]))
                conn.execute(self._q["stream_spool_settle"], params)
                conn.execute(self._q["stream_set_acked"], {"session": session, "acked": upto})
            if reached is not None:
                span = {"queue": queue, "upto": reached.position}
                if reached.remove:  # before the pointer moves: the range starts at it
                    name, extra = self.selected("stream_remove", reached.select)
                    conn.execute(self._q[name], span | {"at": reached.at} | extra)
                conn.execute(self._q["stream_advance"], span | {"now": self.clock.now()})
        if lanes:
            self._notifier.signal([queue])  # lanes got new heads

    def _keep_spool(
        self, conn: psycopg.Connection[Any], params: Mapping[str, Any], settled_at: float
    ) -> None:
        """Put the spooled rounds being settled back into the queue, as done messages."""
        blobs = conn.execute(self._q["stream_spool_read"], params).fetchall()
        if blobs:
            from sluice.backends import postgres_spool as spool  # noqa: PLC0415 (Arrow: sluice-queue[spark])

            with conn.cursor().copy(self._q["stream_restore"]) as copy:
                for _, data in blobs:
                    for row in spool.kept_rows(spool.unpack(bytes(data)), settled_at):
                        copy.write_row(row)

    def stream_pointer(self, queue: str) -> int:
        found = self._one("stream_pointer", {"queue": queue})
        if not found:
            raise QueueNotFound(f"queue {queue!r} does not exist")
        return int(found[0][0])

    def stream_last(self, queue: str, after: int, ceiling: int = NO_CEILING) -> int | None:
        params = {"queue": queue, "after": after, "ceiling": ceiling}
        found = first(self._one("stream_last", params))
        return None if found is None else int(found)

    def stream_span(
        self,
        queue: str,
        after: int,
        *,
        limit: int,
        ceiling: int,
        now: float,
        select: Selection | None,
    ) -> tuple[int, int]:
        name, extra = self.selected("stream_span", select)
        cut, _ = self.selected("stream_nth", select)
        params = {"queue": queue, "now": now} | extra
        with self._conn() as conn:
            bounds = {"queue": queue, "after": after, "ceiling": ceiling}
            head = first(conn.execute(self._q["stream_first"], bounds).fetchall())
            tail = first(conn.execute(self._q["stream_last"], bounds).fetchall())

            def window(a: int, b: int) -> Row:
                (row,) = conn.execute(self._q[name], params | {"after": a, "upto": b}).fetchall()
                return tuple(row)

            def nth(a: int, b: int, n: int) -> int:
                span = params | {"after": a, "upto": b, "skip": n - 1}
                return int(first(conn.execute(self._q[cut], span).fetchall()))

            return span_end(after, limit, (head, tail), window, nth)

    def stream_rows(
        self,
        queue: str,
        after: int,
        upto: int,
        *,
        at: float,
        limit: int,
        select: Selection | None,
    ) -> list[Row]:
        return self._read(*self._range_read(queue, after, upto, at=at, limit=limit, select=select))

    def stream_table(
        self,
        queue: str,
        after: int,
        upto: int,
        *,
        at: float,
        limit: int,
        select: Selection | None,
    ) -> pa.Table:
        return self._read_table(
            *self._range_read(queue, after, upto, at=at, limit=limit, select=select)
        )

    def scan_table(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> pa.Table:
        return self._read_table(
            *self._scan_read(queue, state, after, upto, limit=limit, select=select)
        )

    def _range_read(
        self, queue: str, after: int, upto: int, *, at: float, limit: int, select: Selection | None
    ) -> tuple[str, dict[str, Any]]:
        """The statement and parameters of a position range's page, in rows or columns."""
        name, extra = self.selected("stream_rows", select)
        params = {"queue": queue, "after": after, "upto": upto, "at": at, "limit": limit}
        return name, params | extra

    def _scan_read(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> tuple[str, dict[str, Any]]:
        """The statement and parameters of a batch read's page, in rows or columns."""
        name, extra = self.selected("scan", select)
        params = browse_params(queue, state, limit, 0, 0, now=self.clock.now()) | extra
        return name, params | {"after": after, "upto": upto}

    def _read_table(self, name: str, params: Mapping[str, Any]) -> pa.Table:
        """A Spark read's statement as an Arrow table of READ_COLUMNS: its values written
        into it, which ADBC then runs as a binary COPY parsed into Arrow (postgres_arrow)."""
        with self._conn() as conn:
            query = psycopg.ClientCursor(conn).mogrify(self._q[name], params)
        # Named by position: the statement's columns are READ_COLUMNS, some unnamed in it.
        return self._arrow_reader().read(query).rename_columns(READ_COLUMNS)

    @abstractmethod
    def _arrow_reader(self) -> ArrowReader: ...

    def stream_behind(
        self, queue: str, position: int | None, *, limit: int, select: Selection | None
    ) -> int:
        name, extra = self.selected("stream_behind", select)
        params = {"queue": queue, "limit": limit, "now": self.clock.now()}
        params["position"] = NO_CEILING if position is None else position
        return int(first(self._one(name, params | extra)))

    def scan(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> list[Row]:
        return self._read(*self._scan_read(queue, state, after, upto, limit=limit, select=select))

    def _read(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        """A Spark read's rows, in binary: numbers come as they are stored, not as text
        to parse, which is a third of what fetching a read's rows costs here."""
        with self._conn() as conn:
            rows: list[Row] = conn.cursor(binary=True).execute(self._q[name], params).fetchall()
            return rows

    def drop_stream(self, queue: str, name: str) -> bool:
        with self._transaction() as conn:
            found = conn.execute(self._q["stream_find"], {"queue": queue, "name": name}).fetchall()
            if not found:
                return False
            session = {"session": StreamState(*found[0]).session}
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
            from sluice.backends import postgres_spool as spool  # noqa: PLC0415 (Arrow: sluice-queue[spark])

            with conn.cursor().copy(self._q["stream_restore"]) as copy:
                for round_, data in blobs:
                    rows = spool.restore_rows(spool.unpack(bytes(data)), session["session"], round_)
                    for row in rows:
                        copy.write_row(row)
            conn.execute(self._q["stream_spool_drop"], session)

    def publish_staged(
        self, parts: Sequence[StagedPart], sink: str | None = None, batch: int = 0
    ) -> bool:
        try:
            with self._transaction() as conn:
                fresh = True
                if sink is not None:
                    locked = conn.execute(self._q["sink_batch_lock"], {"name": sink})
                    last = first(locked.fetchall())
                    fresh = not sink_seen(sink, batch, None if last is None else int(last))
                    if fresh:
                        conn.execute(self._q["sink_record"], {"name": sink, "batch": batch})
                for part in parts if fresh else ():
                    plan = CommitPlan(part.session, part.tx, pending=part.rows, lanes=part.lanes)
                    for name, params in commit_statements(plan):
                        conn.execute(self._q[name], params)
                    conn.execute(self._q["close_session"], {"session": part.session})
                if sink is not None:
                    orphans = {"host": sink_host(sink), "batch": batch}
                    conn.execute(self._q["sink_orphans"], orphans)
                    self._roll_back_orphans(conn)
        except Expected as exc:
            raise LeaseLost(
                "staged messages are missing (their Spark task's session expired or was "
                "rolled back); nothing was published"
            ) from exc
        self._notifier.signal()
        return fresh


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
