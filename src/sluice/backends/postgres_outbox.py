"""Queue transactions inside the caller's own psycopg transaction (transactional outbox).

``db.transaction(connection=conn)`` runs every statement of the queue
transaction on ``conn``, inside whatever transaction the caller has open
there, and never commits: the caller's ``conn.commit()`` makes the business
rows and the messages happen together, and a rollback (or the caller's death,
which PostgreSQL rolls back) makes both vanish, claims included.

Messages still become visible in commit order: committing the queue
transaction takes its queues' commit locks, which the caller's transaction
holds until it ends. Commit the connection promptly after the queue
transaction: producers to the same queues wait for it meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from sluice.backends.base import CommitPlan, Envelope, Lane, Row, Selection, browse_params
from sluice.backends.postgres import (
    PostgresBackend,
    _commit_statements,
    _enqueue,
    _Expected,
    _lanes_params,
    _rows,
    _translate,
    abort_statements,
    claim_rounds,
    commit_failure,
    fronts,
    lane_front_statements,
    release_statements,
)
from sluice.backends.postgres_notify import payload
from sluice.errors import ConfigurationError, QueueNotFound

__all__ = ["ConnectionBackend"]


class ConnectionBackend:
    """The message operations of a PostgresBackend, run on a caller's connection."""

    def __init__(self, backend: PostgresBackend, conn: object) -> None:
        if not isinstance(conn, psycopg.Connection):
            raise ConfigurationError(
                "transaction(connection=...) takes a psycopg 3 Connection, "
                f"not {type(conn).__name__}"
            )
        if conn.closed:
            raise ConfigurationError("the connection given to transaction() is closed")
        if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
            raise ConfigurationError(
                "the connection is in autocommit mode outside a transaction, so nothing would "
                "commit together; open one (with conn.transaction(): ...) or use autocommit=False"
            )
        self._backend = backend
        self._conn: psycopg.Connection[Any] = conn
        self._q = backend._q

    def _run(self, statements: Sequence[tuple[str, Any]]) -> list[list[Row]]:
        results = []
        try:
            for name, params in statements:
                cur = self._conn.execute(self._q[name], params)
                results.append(cur.fetchall() if cur.description else [])
        except psycopg.Error as exc:
            raise _translate(exc) from exc
        return results

    def _checked(
        self, statements: Sequence[tuple[str, Any]], envelopes: Sequence[Envelope]
    ) -> None:
        try:
            self._run(statements)
        except _Expected as exc:
            if exc.what == "queue not found":
                raise self._backend._queue_not_found(envelopes) from None
            raise

    def _notify(self) -> None:
        # Inside the caller's transaction: delivered if, and when, it commits. From
        # nobody in particular: this process's waiters need it as much as others.
        note = payload("-", None)
        self._conn.execute(self._q["notify"], {"channel": self._backend._channel, "payload": note})

    def append(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> None:
        # durable=True: the caller's commit is flushed as the caller has it.
        statements = [_enqueue(session, tx, envelopes, ready, True)]
        lanes = sorted({(e.queue, e.lane) for e in envelopes if e.lane is not None})
        if ready and lanes:
            statements.append(("promote", _lanes_params(lanes)))
        self._checked(statements, envelopes)
        if ready:
            self._notify()

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
            lambda name, params: self._backend._keep_due(queue, self._run([(name, params)])[0]),
            self._backend._selected,
            clock=self._backend.clock,
            session=session,
            tx=tx,
            queue=queue,
            limit=limit,
            own=own,
            select=select,
            lanes=lanes,
            fill=fill,
            suffix="_in_caller_tx",
        )

    def lane_fronts(self, queue: str, lanes: Sequence[str]) -> dict[str, tuple[int, int]]:
        # On the caller's connection: its own claims are not yet visible elsewhere.
        return fronts(lanes, self._run(lane_front_statements(queue, lanes)))

    def release(
        self, session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None:
        self._run(release_statements(session, tx, refs, lanes))
        self._notify()

    def commit(self, plan: CommitPlan) -> None:
        try:
            self._checked(_commit_statements(plan, in_caller_tx=True), plan.enqueues)
        except _Expected as exc:
            raise commit_failure(plan, exc) from exc
        except QueueNotFound:
            raise
        if plan.enqueues or plan.pending or plan.rejects or plan.lanes:
            self._notify()

    def abort(self, session: int, tx: int, held: Sequence[int], lanes: Sequence[Lane] = ()) -> None:
        key = {"session": session, "tx": tx, "ids": None}
        self._run(abort_statements(key, bool(held), lanes))

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
        name, extra = self._backend._selected("browse", select)
        now = self._backend.clock.now()
        params = browse_params(queue, state, limit, session, tx, now=now) | extra
        return _rows(self._run([(name, params)])[0])

    def next_due(self, queue: str) -> float | None:
        return self._backend.next_due(queue)  # answered by the empty claim, or asked anew
