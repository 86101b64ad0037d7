"""The SQLite backend's claims: one statement for a single message, rounds in one
``BEGIN IMMEDIATE`` for more (a lane's run taken whole), and the count of a queue's
credit where it has ``max_in_flight``."""

from __future__ import annotations

import json
import sqlite3
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from sluice.backends.records import MessageRow, Row, Selection, message_row
from sluice.backends.sqlite_statements import capped_limit, ids
from sluice.clock import Clock

__all__ = ["SQLiteClaims"]


class SQLiteClaims:
    """The claims of ``SQLiteBackend`` (mixed into it)."""

    _q: dict[str, str]
    clock: Clock

    @abstractmethod
    def _transaction(
        self, *, durable: bool = True
    ) -> AbstractContextManager[sqlite3.Connection]: ...

    @abstractmethod
    def _single(
        self, statement: str, params: Any, *, durable: bool = True
    ) -> tuple[list[Row], int]: ...

    @abstractmethod
    def _selected(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]: ...

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
        chain: bool = True,
    ) -> list[MessageRow]:
        # Claims commit without fsync. A claim is not state worth a disk flush: a
        # power cut that undid it also killed its session, whose claims recovery
        # would give back anyway; and the next durable commit's fsync covers it.
        params = {
            "session": session,
            "tx": tx,
            "queue": queue,
            "limit": limit,
            "now": self.clock.now(),
        }
        one = "claim_with_own_one" if own else "claim_one"
        if capped:
            with self._transaction(durable=False) as conn:
                # Counted and claimed in one BEGIN IMMEDIATE: SQLite's one writer keeps
                # every other claimer, in any process, out until this one commits.
                credit = capped_limit(conn, self._q["queue_credit"], queue, limit)
                if credit == 0:
                    return []
                if credit == 1 and not lanes:
                    query, extra = self._selected(one, select)
                    params["limit"] = 1
                    return list(map(message_row, conn.execute(query, params | extra)))
                return self._claim_rounds(
                    conn,
                    params,
                    credit,
                    own=own,
                    select=select,
                    lanes=lanes,
                    fill=fill,
                    chain=chain,
                )
        if limit == 1 and not lanes:
            # One statement, run without BEGIN/COMMIT; a scalar subquery picks the row.
            query, extra = self._selected(one, select)
            rows, _ = self._single(query, params | extra if extra else params, durable=False)
            return list(map(message_row, rows))
        with self._transaction(durable=False) as conn:
            return self._claim_rounds(
                conn, params, limit, own=own, select=select, lanes=lanes, fill=fill, chain=chain
            )

    def _claim_rounds(
        self,
        conn: sqlite3.Connection,
        params: dict[str, Any],
        limit: int,
        *,
        own: bool,
        select: Selection | None,
        lanes: Sequence[str],
        fill: bool,
        chain: bool = True,
    ) -> list[MessageRow]:
        """Claim up to ``limit`` in the caller's transaction, a round at a time.

        Of a lane only the head is claimable, or the next message for the lane's
        holder: each round takes what is claimable now, and lanes it took from offer
        their next message to the following round.
        """
        session, tx = params["session"], params["tx"]
        name = "select_claimable_with_own" if own else "select_claimable"
        rows: list[MessageRow] = []
        owned = set(lanes)
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
            # Selected with the claimed state, which mark_claimed gives them next.
            taken = list(map(message_row, conn.execute(query, params | extra).fetchall()))
            if not taken:
                break
            params["ids"] = ids([row.id for row in taken])
            conn.execute(self._q["mark_claimed"], params)
            rows += taken
            more = {r.lane for r in taken if r.lane is not None and not _own(r, session, tx)}
            if not more or not chain:
                break  # no lane took part: this round took all there was
            owned |= more
        return rows


def _own(row: MessageRow, session: int, tx: int) -> bool:
    return bool(row.p_session == session and row.p_tx == tx)
