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

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import psycopg
from psycopg.pq import TransactionStatus

from sluice.backends.base import TxStore
from sluice.backends.postgres_notify import payload
from sluice.backends.postgres_statements import (
    Expected,
    abort_statements,
    claim_rounds,
    commit_failure,
    commit_statements,
    credit_limit,
    credit_statements,
    enqueue_statement,
    fetched,
    fronts,
    lane_front_statements,
    lanes_params,
    message_rows,
    release_statements,
    translate,
)
from sluice.backends.records import (
    CommitPlan,
    Envelope,
    Lane,
    MessageRow,
    Row,
    Selection,
    browse_params,
)
from sluice.clock import Clock
from sluice.errors import ConfigurationError, QueueNotFound

__all__ = ["ConnectionBackend", "OutboxHost", "PostgresOutbox"]


class OutboxHost(Protocol):
    """What the outbox uses of the PostgreSQL backend: its public seams, nothing private."""

    @property
    def statements(self) -> Mapping[str, str]: ...

    channel: str
    clock: Clock

    def selected(self, name: str, select: Selection | None) -> tuple[str, dict[str, Any]]: ...

    def keep_due(self, queue: str, rows: list[Row]) -> list[MessageRow]: ...

    def queue_not_found(self, envelopes: Sequence[Envelope]) -> QueueNotFound: ...

    def next_due(self, queue: str) -> float | None: ...


class PostgresOutbox:
    """The Outbox capability of a PostgreSQL backend."""

    def __init__(self, host: OutboxHost) -> None:
        self._host = host

    def bind(self, connection: object) -> TxStore:
        return ConnectionBackend(self._host, connection)


class ConnectionBackend:
    """The message operations of a PostgresBackend, run on a caller's connection."""

    def __init__(self, backend: OutboxHost, conn: object) -> None:
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
        self._q = backend.statements

    def _run(self, statements: Sequence[tuple[str, Any]]) -> list[list[Row]]:
        results = []
        try:
            for name, params in statements:
                cur = self._conn.execute(self._q[name], params)
                results.append(fetched(cur))
        except psycopg.Error as exc:
            raise translate(exc) from exc
        return results

    def _checked(
        self, statements: Sequence[tuple[str, Any]], envelopes: Sequence[Envelope]
    ) -> None:
        try:
            self._run(statements)
        except Expected as exc:
            if exc.what == "queue not found":
                raise self._backend.queue_not_found(envelopes) from None
            raise

    def _notify(self) -> None:
        # Inside the caller's transaction: delivered if, and when, it commits. From
        # nobody in particular: this process's waiters need it as much as others.
        note = payload("-", None)
        self._conn.execute(self._q["notify"], {"channel": self._backend.channel, "payload": note})

    def append(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> None:
        # durable=True: the caller's commit is flushed as the caller has it.
        statements = [enqueue_statement(session, tx, envelopes, ready, True)]
        lanes = sorted({(e.queue, e.lane) for e in envelopes if e.lane is not None})
        if ready and lanes:
            statements.append(("promote", lanes_params(lanes)))
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
        capped: bool = False,
        chain: bool = True,
    ) -> list[MessageRow]:
        if capped:
            # The queue's credit lock is held until the caller's transaction ends: its
            # claims are not visible to other claimers before.
            limit = credit_limit(limit, self._run(credit_statements(queue))[-1])
            if not limit:
                return []
        return claim_rounds(
            lambda name, params: self._backend.keep_due(queue, self._run([(name, params)])[0]),
            self._backend.selected,
            clock=self._backend.clock,
            session=session,
            tx=tx,
            queue=queue,
            limit=limit,
            own=own,
            select=select,
            lanes=lanes,
            fill=fill,
            chain=chain,
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
            self._checked(commit_statements(plan, in_caller_tx=True), plan.enqueues)
        except Expected as exc:
            raise commit_failure(plan, exc) from exc
        except QueueNotFound:
            raise
        if plan.enqueues or plan.pending or plan.rejects or plan.lanes or plan.freed:
            self._notify()

    def commit_many(self, plans: Sequence[CommitPlan]) -> list[BaseException | None]:
        # All in the caller's transaction already: one after the other. A failed one
        # fails the caller's transaction, as a failed commit does here.
        for plan in plans:
            self.commit(plan)
        return [None] * len(plans)

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
        after: tuple[int, int] | None = None,
    ) -> list[MessageRow]:
        name, extra = self._backend.selected("browse_done" if state == "done" else "browse", select)
        now = self._backend.clock.now()
        params = browse_params(queue, state, limit, session, tx, now=now, after=after) | extra
        return message_rows(self._run([(name, params)])[0])

    def next_due(self, queue: str) -> float | None:
        return self._backend.next_due(queue)  # answered by the empty claim, or asked anew
