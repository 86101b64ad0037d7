"""The SQLite backend's Spark streams and sinks: rounds claimed in place, positions read
by id range, staged writes published at once (mixed into ``SQLiteBackend``)."""

from __future__ import annotations

import sqlite3
import time
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from sluice.backends.records import (
    STREAM_LEASE,
    CommitPlan,
    HeldRow,
    Lane,
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
from sluice.backends.sqlite_statements import capped_limit
from sluice.backends.stream_positions import NO_CEILING, span_end
from sluice.clock import Clock
from sluice.errors import QueueNotFound

if TYPE_CHECKING:
    import pyarrow as pa  # sluice-queue[spark]

__all__ = ["SQLiteStreams"]


class SQLiteStreams:
    """The Streams and Sinks capabilities of ``SQLiteBackend``."""

    _q: dict[str, str]
    clock: Clock

    @abstractmethod
    def _transaction(
        self, *, durable: bool = True
    ) -> AbstractContextManager[sqlite3.Connection]: ...

    @abstractmethod
    def _reading(self) -> AbstractContextManager[sqlite3.Connection]: ...

    @abstractmethod
    def _selected(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]: ...

    @abstractmethod
    def _promote(self, conn: Any, lanes: Sequence[Lane] | set[Lane]) -> None: ...

    @abstractmethod
    def _roll_back_orphans(self, conn: Any) -> None: ...

    @abstractmethod
    def _apply(self, conn: sqlite3.Connection, plan: CommitPlan) -> None: ...

    def open_stream(self, queue: str, name: str) -> StreamState:
        key = {"queue": queue, "name": name, "now": self.clock.now()}
        with self._transaction() as conn:
            found = conn.execute(self._q["stream_find"], key).fetchone()
            if found is not None:
                return StreamState(*found)
            params = {"host": stream_host(queue, name), "pid": 0, "lease": STREAM_LEASE}
            params["now"] = time.time()  # a lease: real time, as open_session's
            params["mono"] = time.monotonic()
            session = conn.execute(self._q["open_session"], key | params).lastrowid
            if conn.execute(self._q["stream_insert"], key | {"session": session}).rowcount != 1:
                raise QueueNotFound(f"queue {queue!r} does not exist")
            return StreamState(int(session or 0), 0, 0)

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
        with self._reading() as conn:
            rows = conn.execute(self._q["stream_held"], params | {"part": part, "parts": parts})
            return list(map(held_row, rows.fetchall()))

    def stream_spooled(
        self, session: int, after: int, upto: int, *, part: int = 0, parts: int = 1
    ) -> list[pa.Table]:
        return []  # SQLite claims a round in place: an UPDATE is no dearer than a move here

    def stream_claim(
        self, session: int, round: int, queue: str, limit: int, select: Selection | None
    ) -> int:
        query, extra = self._selected("stream_claim", select)
        params = {"session": session, "tx": round, "queue": queue, "limit": limit}
        # Without fsync, as every claim: set_stream_round's commit makes it durable.
        with self._transaction(durable=False) as conn:
            # A round takes no more than a capped queue's credit, counted in the same
            # transaction, as a claim does.
            params["limit"] = capped_limit(conn, self._q["queue_credit"], queue, limit)
            if not params["limit"]:
                return 0
            return int(conn.execute(query, params | {"now": self.clock.now()} | extra).rowcount)

    def stream_settle(
        self, session: int, queue: str, after: int, upto: int, *, reached: Reached | None = None
    ) -> None:
        params = {"session": session, "queue": queue, "after": after, "upto": upto}
        with self._transaction() as conn:
            if upto > after:
                settled = []
                kept = conn.execute(self._q["queue_retention"], params).fetchone()
                if kept is not None and kept[0] is not None:  # kept as done (docs/retention.md)
                    now = self.clock.now()
                    settled += conn.execute(
                        self._q["stream_keep"], params | {"now": now}
                    ).fetchall()
                settled += conn.execute(self._q["stream_settle"], params).fetchall()
                self._promote(conn, {(queue, lane) for (lane,) in settled if lane is not None})
                conn.execute(self._q["stream_set_acked"], {"session": session, "acked": upto})
            if reached is not None:
                span = {"queue": queue, "upto": reached.position}
                if reached.remove:  # before the pointer moves: the range starts at it
                    query, extra = self._selected("stream_remove", reached.select)
                    conn.execute(query, span | {"at": reached.at} | extra)
                conn.execute(self._q["stream_advance"], span | {"now": self.clock.now()})

    def stream_pointer(self, queue: str) -> int:
        with self._reading() as conn:
            found = conn.execute(self._q["stream_pointer"], {"queue": queue}).fetchone()
        if found is None:
            raise QueueNotFound(f"queue {queue!r} does not exist")
        return int(found[0])

    def stream_last(self, queue: str, after: int, ceiling: int = NO_CEILING) -> int | None:
        with self._reading() as conn:
            params = {"queue": queue, "after": after, "ceiling": ceiling}
            row = conn.execute(self._q["stream_last"], params).fetchone()
        return None if row is None else int(row[0])

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
        query, extra = self._selected("stream_span", select)
        cut, _ = self._selected("stream_nth", select)
        params = {"queue": queue, "now": now} | extra
        with self._reading() as conn:
            bounds = {"queue": queue, "after": after, "ceiling": ceiling}
            head = conn.execute(self._q["stream_first"], bounds).fetchone()
            tail = conn.execute(self._q["stream_last"], bounds).fetchone()
            ends = (None if head is None else int(head[0]), None if tail is None else int(tail[0]))

            def window(a: int, b: int) -> Row:
                row: Row = conn.execute(query, params | {"after": a, "upto": b}).fetchone()
                return row

            def nth(a: int, b: int, n: int) -> int:
                span = params | {"after": a, "upto": b, "skip": n - 1}
                return int(conn.execute(cut, span).fetchone()[0])

            return span_end(after, limit, ends, window, nth)

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
        query, extra = self._selected("stream_rows", select)
        params = {"queue": queue, "after": after, "upto": upto, "at": at, "limit": limit}
        with self._reading() as conn:
            rows: list[Row] = conn.execute(query, params | extra).fetchall()
            return rows

    def stream_table(
        self,
        queue: str,
        after: int,
        upto: int,
        *,
        at: float,
        limit: int,
        select: Selection | None,
    ) -> None:
        """None: SQLite's driver makes Python objects of the rows whatever reads them, so the
        source reads them as rows (stream_rows)."""

    def stream_behind(
        self, queue: str, position: int | None, *, limit: int, select: Selection | None
    ) -> int:
        query, extra = self._selected("stream_behind", select)
        params = {"queue": queue, "limit": limit, "now": self.clock.now()}
        params["position"] = NO_CEILING if position is None else position
        with self._reading() as conn:
            return int(conn.execute(query, params | extra).fetchone()[0])

    def scan(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> list[Row]:
        query, extra = self._selected("scan", select)
        params = browse_params(queue, state, limit, 0, 0, now=self.clock.now()) | extra
        params |= {"after": after, "upto": upto}
        with self._reading() as conn:
            rows: list[Row] = conn.execute(query, params).fetchall()
            return rows

    def scan_table(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> None:
        """None: rows, as ``stream_table`` says."""

    def drop_stream(self, queue: str, name: str) -> bool:
        with self._transaction() as conn:
            found = conn.execute(self._q["stream_find"], {"queue": queue, "name": name}).fetchone()
            if found is None:
                return False
            session = {"session": StreamState(*found).session}
            conn.execute(self._q["stream_delete"], session)
            conn.execute(self._q["close_session"], session)
            self._roll_back_orphans(conn)
            return True

    def publish_staged(
        self, parts: Sequence[StagedPart], sink: str | None = None, batch: int = 0
    ) -> bool:
        with self._transaction() as conn:
            fresh = True
            if sink is not None:
                last = conn.execute(self._q["sink_batch"], {"name": sink}).fetchone()
                fresh = not sink_seen(sink, batch, None if last is None else int(last[0]))
                if fresh:
                    record = {"name": sink, "batch": batch, "now": self.clock.now()}
                    conn.execute(self._q["sink_record"], record)
            for part in parts if fresh else ():
                plan = CommitPlan(part.session, part.tx, pending=part.rows, lanes=part.lanes)
                self._apply(conn, plan)
                conn.execute(self._q["close_session"], {"session": part.session})
            if sink is not None:
                conn.execute(self._q["sink_orphans"], {"host": sink_host(sink), "batch": batch})
                self._roll_back_orphans(conn)
            return fresh
