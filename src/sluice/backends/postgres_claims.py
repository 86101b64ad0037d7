"""The PostgreSQL backend's claims: ``FOR UPDATE SKIP LOCKED`` in one round trip, the
credit-counted claim of a queue with ``max_in_flight``, and the ``next_due`` an empty
claim has answered already."""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg

from sluice.backends.postgres_statements import (
    claim_answer,
    claim_rounds,
    credit_limit,
    credit_statements,
    first,
)
from sluice.backends.records import ConnectionLost, MessageRow, Row, Selection
from sluice.clock import Clock

__all__ = ["PostgresClaims"]


class PostgresClaims:
    """The claims of ``PostgresBackend`` (mixed into it)."""

    _q: dict[str, str]
    _due: threading.local
    """The answer to ``next_due`` of this thread's last empty claim."""
    clock: Clock

    @abstractmethod
    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    @abstractmethod
    def _one(self, name: str, params: Any, *, durable: bool = True) -> list[Row]: ...

    @abstractmethod
    def selected(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]: ...

    @abstractmethod
    def claim_unknown(self, session: int, tx: int) -> None: ...

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
        if capped:
            return self._capped_claim(session, tx, queue, limit, own, select, lanes, fill, chain)
        return self.rounds(
            lambda name, params: self._claim(session, tx, name, params), session, tx, queue,
            limit, own=own, select=select, lanes=lanes, fill=fill, chain=chain,
        )  # fmt: skip

    def rounds(
        self,
        run: Callable[[str, dict[str, Any]], list[MessageRow]],
        session: int,
        tx: int,
        queue: str,
        limit: int,
        *,
        own: bool = False,
        select: Selection | None = None,
        lanes: Sequence[str] = (),
        fill: bool = True,
        chain: bool = True,
    ) -> list[MessageRow]:
        """A claim's rounds (claim_steps), each statement run by ``run``; by default a
        plain one (no own enqueues, selection or lanes held)."""
        return claim_rounds(
            run, self.selected, clock=self.clock, session=session, tx=tx, queue=queue,
            limit=limit, own=own, select=select, lanes=lanes, fill=fill, suffix="", chain=chain,
        )  # fmt: skip

    @contextmanager
    def claiming(self, session: int, tx: int) -> Iterator[None]:
        """A claim's round trip: if its answer was lost, the claim may have committed
        unheard, and the transaction's end gives back what it may hold."""
        try:
            yield
        except ConnectionLost:
            self.claim_unknown(session, tx)
            raise

    def _claim(self, session: int, tx: int, name: str, params: dict[str, Any]) -> list[MessageRow]:
        with self.claiming(session, tx):
            # One statement that relaxes its own commit: one round trip.
            rows = self._one(name, params)
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
        chain: bool = True,
    ) -> list[MessageRow]:
        """A claim on a queue with max_in_flight: the queue's credit lock, its count and the
        claim in one transaction, so its claimers anywhere never hold more than the cap.

        Three round trips (the count, the claim, the commit) where an uncapped claim
        takes one: the cap costs only the queues that have one.
        """
        with self.claiming(session, tx), self._conn() as conn, conn.pipeline():
            conn.execute("BEGIN")
            conn.execute("SET LOCAL synchronous_commit TO off")
            for name, params in credit_statements(queue):
                cur = conn.execute(self._q[name], params)
            credit = credit_limit(limit, cur.fetchall())
            rows = []
            if credit:
                rows = self.rounds(
                    lambda name, params: self.keep_due(
                        queue, conn.execute(self._q[name], params).fetchall()
                    ),
                    session, tx, queue, credit,
                    own=own, select=select, lanes=lanes, fill=fill, chain=chain,
                )  # fmt: skip
            conn.execute("COMMIT")
        return rows

    def keep_due(self, queue: str, rows: list[Row]) -> list[MessageRow]:
        """Claimed rows; an empty claim's answer to ``next_due`` is kept for this thread."""
        claimed, due = claim_answer(rows)
        if due is not None:
            self._due.answer = (queue, due[0])
        return claimed

    def next_due(self, queue: str) -> float | None:
        # Asked right after an empty claim, whose statement answered it already.
        answer, self._due.answer = getattr(self._due, "answer", None), None
        if answer is not None and answer[0] == queue:
            return None if answer[1] is None else float(answer[1])
        rows = self._one("next_due", {"queue": queue, "now": self.clock.now()})
        value = first(rows)
        return None if value is None else float(value)
