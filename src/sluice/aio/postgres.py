"""PostgreSQL's hot path on asyncio connections: enqueue, claim, release, commit, abort.

The same named statements the blocking backend runs (``PostgresBackend``'s
statements, ``claim_steps``, ``commit_unit``...), sent on psycopg's
``AsyncConnection`` from an ``AsyncConnectionPool``, one round trip per unit as
there. The backend decides what a unit runs and whom it notifies; this module
only does the IO. What is not on the hot path runs on the blocking backend in
the database's thread: claims on queues with ``max_in_flight`` (their credit
lock), blockwise commits' lane checks, browsing, ``next_due`` when no claim
answered it, and the catalog. Acknowledgements that coroutines make at once share a
transaction (``group_commit``), as threads' do there. Unlike the blocking backend, an
abort is not retried through a server restart: the session's end rolls it back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg.pq import TransactionStatus

from sluice.aio.group_commit import AsyncGroupCommitter
from sluice.aio.runner import Runner
from sluice.backends.postgres import PostgresBackend
from sluice.backends.postgres_pooler import LOCAL, LOCAL_RELAXED
from sluice.backends.postgres_statements import (
    Expected,
    Route,
    claim_answer,
    claim_steps,
    commit_failure,
    no_connection,
    release_statements,
    translate,
)
from sluice.backends.records import (
    CommitPlan,
    ConnectionLost,
    Envelope,
    Lane,
    MessageRow,
    Row,
    Selection,
    plain_ack,
)
from sluice.engine.steps import Call
from sluice.errors import QueueNotFound, SluiceError, StorageError

__all__ = ["PostgresStore"]


class PostgresStore:
    """The ``AsyncStore`` of a PostgreSQL database (see the module docstring)."""

    def __init__(self, backend: PostgresBackend, runner: Runner) -> None:
        self._backend = backend
        self._runner = runner
        self._q = backend.statements
        self._due: dict[str, float | None] = {}  # an empty claim's answer to next_due
        settings = backend.settings
        self._pool: psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[Any]] = (
            psycopg_pool.AsyncConnectionPool(
                backend.conninfo,
                min_size=1,
                max_size=max(1, settings.pool_size),
                kwargs={"autocommit": True, **backend.connect_kwargs},
                open=False,
                name="sluice-aio",
                timeout=settings.connect_timeout,
                reconnect_timeout=0,
                # Behind a transaction-mode pooler a session SET would reach other
                # clients' transactions: there the settings go with each transaction.
                configure=None if settings.pooler else _configure,
            )
        )
        self._pooled = settings.pooler is not None
        self._timeout = settings.connect_timeout
        self._group = AsyncGroupCommitter(self._commit_many) if settings.group_commit else None

    async def open(self) -> None:
        """Open the pool's first connection; StorageError if none can be had."""
        try:
            await self._pool.open(wait=True, timeout=self._timeout)
        except psycopg_pool.PoolTimeout as exc:
            await self._pool.close()
            raise StorageError(f"cannot connect to PostgreSQL: {exc}") from exc

    async def close(self) -> None:
        await self._pool.close()

    async def call(self, step: Call) -> Any:
        method = getattr(self, f"_{step.method}", None)
        if method is None:  # not the hot path: the blocking backend, in the thread
            work = getattr(self._backend, step.method)
            return await self._runner(work, *step.args, **step.kwargs)
        return await method(*step.args, **step.kwargs)

    # --- connections -----------------------------------------------------------------
    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection; what fails on it leaves no transaction open (as the
        blocking backend's ``_conn``), and driver errors become StorageError."""
        try:
            async with self._pool.connection() as conn:
                try:
                    yield conn
                except BaseException as exc:
                    await _rollback(conn)
                    if isinstance(exc, psycopg.Error):
                        raise translate(exc) from exc
                    raise
        except psycopg_pool.PoolTimeout as exc:
            raise no_connection(self._pool, exc) from exc

    async def _run(self, route: Route) -> list[list[Row]]:
        """A unit in one round trip: a statement alone, or BEGIN ... COMMIT pipelined."""
        async with self._conn() as conn:
            if route.single and not self._pooled:
                ((name, params),) = route.statements
                cur = await conn.execute(self._q[name], params)
                return [await cur.fetchall() if cur.description else []]
            cursors = []
            async with conn.pipeline():
                if route.single:  # pooled: the settings in front, one implicit transaction
                    await conn.execute(LOCAL)
                else:
                    await conn.execute("BEGIN")
                    if self._pooled:
                        await conn.execute(LOCAL if route.durable else LOCAL_RELAXED)
                    elif not route.durable:
                        await conn.execute("SET LOCAL synchronous_commit TO off")
                for name, params in route.statements:
                    cursors.append(await conn.execute(self._q[name], params))
                if not route.single:
                    await conn.execute("COMMIT")
            return [await cur.fetchall() if cur.description else [] for cur in cursors]

    async def _checked(
        self, statements: list[tuple[str, Any]], envelopes: Sequence[Envelope], *, durable: bool
    ) -> bool:
        """``_run_checked`` of the blocking backend: whether the unit notified itself."""
        route = self._backend.route(statements, envelopes, durable=durable)
        try:
            await self._run(route)
        except Expected as exc:
            if exc.what == "queue not found":
                raise await self._runner(self._backend.queue_not_found, envelopes) from None
            raise
        return route.notified

    # --- the hot path ----------------------------------------------------------------
    async def _append(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> None:
        statements = self._backend.append_statements(
            session, tx, envelopes, ready=ready, durable=durable
        )
        notified = await self._checked(statements, envelopes, durable=durable)
        self._backend.appended(envelopes, ready=ready, notified=notified)

    async def _claim(
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
        if capped:  # the queue's credit lock: the blocking backend's transaction
            rows: list[MessageRow] = await self._runner(
                self._backend.claim, session, tx, queue, limit, own=own, select=select,
                lanes=lanes, fill=fill, capped=True, chain=chain,
            )  # fmt: skip
            return rows
        steps = claim_steps(self._backend.selected, clock=self._backend.clock, session=session,
                            tx=tx, queue=queue, limit=limit, own=own, select=select, lanes=lanes,
                            fill=fill, suffix="", chain=chain)  # fmt: skip
        try:
            name, params = next(steps)
            while True:
                name, params = steps.send(await self._claim_one(session, tx, name, params))
        except StopIteration as stop:
            found: list[MessageRow] = stop.value
            return found

    async def _claim_one(
        self, session: int, tx: int, name: str, params: dict[str, Any]
    ) -> list[MessageRow]:
        try:
            (rows,) = await self._run(Route([(name, params)], True, True, False))
        except ConnectionLost:
            self._backend.claim_unknown(session, tx)
            raise
        claimed, due = claim_answer(rows)
        if due is not None:
            self._due[params["queue"]] = due[0]
        return claimed

    async def _next_due(self, queue: str) -> float | None:
        if queue in self._due:
            return self._due.pop(queue)
        due: float | None = await self._runner(self._backend.next_due, queue)
        return due

    async def _release(
        self, session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None:
        statements = release_statements(session, tx, refs, lanes)
        await self._run(Route(statements, False, False, False))
        self._backend.released()

    async def _commit(self, plan: CommitPlan) -> None:
        # As the blocking backend: acknowledgements that coroutines make at once go as one
        # statement in one transaction (one round trip and one WAL flush for them all).
        if self._group is not None and plain_ack(plan):
            await self._group.commit(plan)
        else:
            await self._commit_one(plan)

    async def _commit_one(self, plan: CommitPlan) -> None:
        statements = self._backend.commit_unit(plan)
        try:
            notified = await self._checked(statements, plan.enqueues, durable=plan.durable)
        except Expected as exc:
            raise commit_failure(plan, exc) from exc
        self._backend.committed(plan, notified=notified)

    async def _commit_many(self, plans: Sequence[CommitPlan]) -> list[BaseException | None]:
        """The blocking backend's ``commit_many`` on this loop: all plans in one
        transaction; if any fails (a lease lost, a queue gone), each is committed alone."""
        if len(plans) > 1:
            enqueues = [e for plan in plans for e in plan.enqueues]
            durable = any(p.durable for p in plans)
            try:
                notified = await self._checked(
                    self._backend.group_unit(plans), enqueues, durable=durable
                )
            except (Expected, QueueNotFound):
                pass
            else:
                for plan in plans:
                    self._backend.committed(plan, notified=notified)
                return [None] * len(plans)
        results: list[BaseException | None] = []
        for plan in plans:
            try:
                await self._commit_one(plan)
            except SluiceError as exc:
                results.append(exc)
            else:
                results.append(None)
        return results

    async def _abort(
        self, session: int, tx: int, held: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None:
        statements = self._backend.abort_unit(session, tx, held, lanes)
        await self._run(Route(statements, False, False, False))
        self._backend.aborted(session, tx, held)


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    # As the blocking pool's connections (backends/postgres.py's _configure says why).
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    await conn.execute("SET jit = off")


async def _rollback(conn: psycopg.AsyncConnection[Any]) -> None:
    if conn.closed:
        return
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        try:
            await conn.rollback()  # not execute("ROLLBACK"): see backends/postgres.py
        except psycopg.Error:
            await conn.close()
