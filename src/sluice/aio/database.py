"""``sluice.aio.connect``: the Database API for asyncio.

Messaging (put, get, transactions, settling) awaits the store: on PostgreSQL
psycopg's asyncio connections, on SQLite and memory the backend in the
database's one thread. Catalog and admin calls (create, alter and drop
queues, types, properties, stats, browse, purge) and the jobs bookkeeping run
the blocking API in that thread on every backend. ``db.sync`` is the blocking
``sluice.Database`` underneath, for what this API does not mirror.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from sluice.aio.context import AsyncContext
from sluice.aio.queue import AsyncQueue
from sluice.aio.runner import Runner
from sluice.aio.store import AsyncStore, ThreadedStore
from sluice.aio.transaction import AsyncTransaction
from sluice.aio.worker import AsyncWorker, LoopWorker
from sluice.catalog import QueueSpec
from sluice.clock import Clock
from sluice.connect import connect as connect_blocking
from sluice.database import Database
from sluice.engine.topics import Subscription
from sluice.errors import ConfigurationError
from sluice.jobs.task import TaskFunction
from sluice.jobs.worker import DEFAULT_GRACE, DEFAULT_POLL

__all__ = ["AsyncDatabase", "Connecting", "attach", "connect"]

P = ParamSpec("P")
T = TypeVar("T")


class AsyncDatabase:
    """A connection to sluice queues for asyncio; close it (or use ``async with``) when done.

    Made by ``sluice.aio.connect`` (or ``attach``); one event loop uses it.
    """

    def __init__(
        self, database: Database, runner: Runner, store: AsyncStore, *, owned: bool = True
    ) -> None:
        self._context = AsyncContext(database, runner, store)
        self._closed = False
        self._owned = owned

    @property
    def sync(self) -> Database:
        """The blocking ``sluice.Database`` underneath (its jobs, rules, topics...)."""
        return self._context.database

    def __getattr__(self, name: str) -> Any:
        # Only for names AsyncDatabase lacks: say where the blocking API's features are
        # reached, instead of a bare AttributeError.
        if not name.startswith("_") and hasattr(Database, name):
            raise AttributeError(
                f"AsyncDatabase has no {name!r}: the blocking Database's {name} is reached "
                f"through db.sync.{name}, and called from asyncio with "
                f"await db.run_sync(db.sync.{name}, ...)"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def session(self) -> int:
        """This connection's session id (the S of message ids)."""
        return self.sync.session

    @property
    def clock(self) -> Clock:
        """The time messages and jobs are judged by (``Database.clock``)."""
        return self.sync.clock

    async def run_sync(self, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a call of the blocking API (``db.sync``...) in this database's thread."""
        return await self._context.runner(work, *args, **kwargs)

    # --- transactions ----------------------------------------------------------------
    def begin(self, *, connection: object | None = None) -> AsyncTransaction:
        """Start a queue transaction; end it with ``await tx.commit()`` or ``abort()``."""
        if connection is not None:
            raise ConfigurationError(
                "sluice.aio has no transaction(connection=...): a queue transaction in a "
                "caller's own transaction needs the blocking API (db.sync.transaction)"
            )
        return AsyncTransaction(self._context)

    def transaction(self, *, connection: object | None = None) -> AsyncTransaction:
        """A transaction for ``async with``: commits on exit, aborts on an exception."""
        return self.begin(connection=connection)

    # --- catalog: the blocking API, in the thread ------------------------------------
    async def create_queue(self, name: str, **options: Any) -> AsyncQueue:
        """Create a queue; options as ``Database.create_queue``."""
        await self.run_sync(self.sync.create_queue, name, **options)
        return AsyncQueue(self._context, name)

    async def create_topic(self, name: str, **options: Any) -> AsyncQueue:
        """Create a topic; options as ``Database.create_topic``."""
        await self.run_sync(self.sync.create_topic, name, **options)
        return AsyncQueue(self._context, name)

    async def subscribe(self, topic: str, name: str, **options: Any) -> AsyncQueue:
        """Subscribe ``name`` to ``topic``; options as ``Database.subscribe``."""
        await self.run_sync(self.sync.subscribe, topic, name, **options)
        return AsyncQueue(self._context, name)

    async def unsubscribe(self, name: str) -> None:
        """End a subscription (``Database.unsubscribe``)."""
        await self.run_sync(self.sync.unsubscribe, name)

    async def subscriptions(self, topic: str | None = None) -> list[Subscription]:
        """Every subscription (of ``topic``), with how far behind it is."""
        return await self.run_sync(self.sync.subscriptions, topic)

    async def queue(self, name: str, *, max_in_flight: int | None = None) -> AsyncQueue:
        """A handle on an existing queue; QueueNotFound if there is none."""
        if max_in_flight is not None:
            raise ConfigurationError(
                "sluice.aio has no per-handle max_in_flight yet; set the queue's own "
                "(db.alter_queue(name, max_in_flight=n)) or use the blocking API"
            )
        await self._context.content(name)
        return AsyncQueue(self._context, name)

    async def queues(self) -> list[QueueSpec]:
        """The settings of every queue, by name."""
        return await self.run_sync(self.sync.queues)

    async def alter_queue(self, name: str, **changes: Any) -> QueueSpec:
        """Change a queue's settings; see ``Database.alter_queue``."""
        return await self.run_sync(self.sync.alter_queue, name, **changes)

    async def drop_queue(self, name: str) -> None:
        """Remove a queue and every message in it (``Database.drop_queue``)."""
        await self.run_sync(self.sync.drop_queue, name)

    async def create_type(self, name: str | None = None, **definition: Any) -> str:
        """Define a message type; see ``Database.create_type``."""
        return await self.run_sync(self.sync.create_type, name, **definition)

    async def create_property(self, name: str, expression: str, **options: Any) -> None:
        """Declare a property; see ``Database.create_property``."""
        await self.run_sync(self.sync.create_property, name, expression, **options)

    async def recover(self) -> list[int]:
        """Roll back sessions whose owners died; returns their ids."""
        return await self.run_sync(self.sync.recover)

    # --- jobs and tasks (docs/jobs.md) -------------------------------------------------
    def task(self, name: str, **options: Any) -> Callable[[TaskFunction], TaskFunction]:
        """Register an ``async def`` (or plain) function for task type ``name``.

        Options as ``Database.task``. Defining the type is a catalog write, made
        when the function is decorated (blocking, once).
        """
        return self.sync.task(name, **options)

    def worker(
        self,
        *,
        tasks: Sequence[str] | None = None,
        concurrency: int = 1,
        batch: int | None = None,
        poll: float | None = None,
        grace: float | None = None,
        signals: Mapping[str, Callable[[], float]] | None = None,
    ) -> AsyncWorker:
        """A worker for the registered task functions: ``await worker.run()`` or
        ``await worker.run_until_idle()``; options as ``Database.worker``."""
        self.sync.worker(tasks=tasks)  # UnknownTaskType as the blocking API raises it
        functions = self.sync.task_functions
        names = list(functions) if tasks is None else list(tasks)
        worker = LoopWorker(
            self.sync,
            self.sync.jobs,
            {name: functions[name] for name in names},
            concurrency=concurrency,
            batch=batch,
            poll=DEFAULT_POLL if poll is None else poll,
            grace=DEFAULT_GRACE if grace is None else grace,
            signals=dict(signals or {}),
            loop=asyncio.get_running_loop(),
        )
        return AsyncWorker(worker)

    # --- closing ---------------------------------------------------------------------
    async def close(self) -> None:
        """End the session: whatever it still holds is rolled back. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._context.store.close()
            if self._owned:
                await self.run_sync(self.sync.close)
        finally:
            self._context.runner.close()

    async def __aenter__(self) -> AsyncDatabase:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class Connecting:
    """What ``connect`` returns: ``await`` it, or use it in ``async with``."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._url = url
        self._options = options
        self._db: AsyncDatabase | None = None

    def __await__(self) -> Generator[Any, None, AsyncDatabase]:
        return self._open().__await__()

    async def _open(self) -> AsyncDatabase:
        runner = Runner()
        try:
            database = await runner(connect_blocking, self._url, **self._options)
        except BaseException:
            runner.close()
            raise
        try:
            return await _over(database, runner, owned=True)
        except BaseException:
            await runner(database.close)
            runner.close()
            raise

    async def __aenter__(self) -> AsyncDatabase:
        self._db = await self._open()
        return self._db

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._db is not None:
            await self._db.close()


async def _over(database: Database, runner: Runner, *, owned: bool) -> AsyncDatabase:
    store: AsyncStore
    if database.backend.dialect == "postgresql":
        from sluice.aio.postgres import PostgresStore  # noqa: PLC0415 (psycopg is optional)
        from sluice.backends.postgres import PostgresBackend  # noqa: PLC0415

        backend = database.backend
        assert isinstance(backend, PostgresBackend)
        pg = PostgresStore(backend, runner)
        await pg.open()
        store = pg
    else:
        store = ThreadedStore(database.backend, runner)
    return AsyncDatabase(database, runner, store, owned=owned)


async def attach(database: Database) -> AsyncDatabase:
    """The asyncio API over an open blocking ``database``, sharing its session, clock
    and wake-ups (an ASGI app given a Database uses it so). Closing the AsyncDatabase
    closes what it opened (its thread, PostgreSQL's asyncio connections), never
    ``database``, which stays its opener's."""
    runner = Runner()
    try:
        return await _over(database, runner, owned=False)
    except BaseException:
        runner.close()
        raise


def connect(url: str, **options: Any) -> Connecting:
    """Open the queues at ``url`` for asyncio: ``db = await sluice.aio.connect(url)`` or
    ``async with sluice.aio.connect(url) as db``. Options as ``sluice.connect``."""
    return Connecting(url, options)
