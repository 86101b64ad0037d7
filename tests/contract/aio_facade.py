"""The blocking API's shape over ``sluice.aio``, so the behaviour suite runs over both APIs.

Each call is one coroutine of the async API, run on an event loop in a
background thread (``asyncio.run_coroutine_threadsafe``): the test bodies stay
as they are, and every put, get, dequeue, settle and commit goes through the
async code paths. A test module opts in by importing ``both_apis``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

import pytest

import sluice.aio
from sluice.aio import AsyncMessage, AsyncQueue, AsyncTransaction

T = TypeVar("T")


@pytest.fixture(params=["sync", "aio"], name="api")
def both_apis(request: pytest.FixtureRequest) -> str:
    """Which API the ``db`` fixture gives: the blocking one, or sluice.aio behind a facade."""
    return str(request.param)


class Loop:
    """An event loop in a thread of its own, running the coroutines it is given."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


@contextmanager
def blocking_facade(url: str) -> Iterator[Database]:
    loop = Loop()
    try:
        db = Database(loop, loop.run(_open(url)))
        try:
            yield db
        finally:
            db.close()
    finally:
        loop.close()


async def _open(url: str) -> sluice.aio.AsyncDatabase:
    return await sluice.aio.connect(url)


class Message:
    """An AsyncMessage whose settling is blocking."""

    def __init__(self, loop: Loop, message: AsyncMessage) -> None:
        self._loop = loop
        self.async_message = message

    def __getattr__(self, name: str) -> Any:
        return getattr(self.async_message, name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Message):
            return self.async_message == other.async_message
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.async_message)

    def __repr__(self) -> str:
        return repr(self.async_message)

    def ack(self) -> None:
        self._loop.run(self.async_message.ack())

    def release(self) -> None:
        self._loop.run(self.async_message.release())

    def reject(self, reason: str) -> None:
        self._loop.run(self.async_message.reject(reason))


def _messages(loop: Loop, found: Iterable[AsyncMessage]) -> list[Message]:
    return [Message(loop, m) for m in found]


class Transaction:
    def __init__(self, loop: Loop, tx: AsyncTransaction) -> None:
        self._loop = loop
        self.async_tx = tx

    def __getattr__(self, name: str) -> Any:  # id, state, closed, savepoint...
        return getattr(self.async_tx, name)

    def __repr__(self) -> str:
        return repr(self.async_tx)

    def enqueue(self, queue: str, body: Any, **options: Any) -> str:
        return self._loop.run(self.async_tx.enqueue(queue, body, **options))

    def enqueue_many(self, queue: str, bodies: Iterable[Any], **options: Any) -> list[str]:
        return self._loop.run(self.async_tx.enqueue_many(queue, bodies, **options))

    def flush(self) -> None:
        self._loop.run(self.async_tx.flush())

    def dequeue(self, queue: str, **options: Any) -> list[Message]:
        return _messages(self._loop, self._loop.run(self.async_tx.dequeue(queue, **options)))

    def release(self, message: Message) -> None:
        self._loop.run(self.async_tx.release(message.async_message))

    def reject(self, message: Message, reason: str) -> None:
        self._loop.run(self.async_tx.reject(message.async_message, reason))

    def browse(self, queue: str, **options: Any) -> list[Message]:
        return _messages(self._loop, self._loop.run(self.async_tx.browse(queue, **options)))

    def commit(self) -> None:
        self._loop.run(self.async_tx.commit())

    def abort(self) -> None:
        self._loop.run(self.async_tx.abort())

    def __enter__(self) -> Transaction:
        self._loop.run(self.async_tx.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._loop.run(self.async_tx.__aexit__(exc_type, exc, tb))


class Queue:
    def __init__(self, loop: Loop, queue: AsyncQueue) -> None:
        self._loop = loop
        self.async_queue = queue
        self.name = queue.name

    def __repr__(self) -> str:
        return repr(self.async_queue)

    @property
    def spec(self) -> Any:
        return self._loop.run(self.async_queue.spec())

    def put(self, body: Any, **options: Any) -> str:
        return self._loop.run(self.async_queue.put(body, **options))

    def put_many(self, bodies: Iterable[Any], **options: Any) -> list[str]:
        return self._loop.run(self.async_queue.put_many(bodies, **options))

    def get(self, **options: Any) -> Message | None:
        found = self._loop.run(self.async_queue.get(**options))
        return None if found is None else Message(self._loop, found)

    def browse(self, limit: int = 100, **options: Any) -> list[Message]:
        return _messages(self._loop, self._loop.run(self.async_queue.browse(limit, **options)))

    def purge(self, state: Any, **options: Any) -> int:
        return self._loop.run(self.async_queue.purge(state, **options))

    def stats(self) -> dict[str, int]:
        return self._loop.run(self.async_queue.stats())

    def __len__(self) -> int:
        return self._loop.run(self.async_queue.length())


class Database:
    """The blocking Database's methods, each run as the AsyncDatabase's coroutine; what
    sluice.aio does not mirror (``backend``, ``context``...) is the blocking one's."""

    def __init__(self, loop: Loop, db: sluice.aio.AsyncDatabase) -> None:
        self._loop = loop
        self.async_db = db

    def __getattr__(self, name: str) -> Any:
        return getattr(self.async_db.sync, name)

    def _queue(self, queue: AsyncQueue) -> Queue:
        return Queue(self._loop, queue)

    def create_queue(self, name: str, **options: Any) -> Queue:
        return self._queue(self._loop.run(self.async_db.create_queue(name, **options)))

    def create_topic(self, name: str, **options: Any) -> Queue:
        return self._queue(self._loop.run(self.async_db.create_topic(name, **options)))

    def subscribe(self, topic: str, name: str, **options: Any) -> Queue:
        return self._queue(self._loop.run(self.async_db.subscribe(topic, name, **options)))

    def queue(self, name: str, **options: Any) -> Queue:
        if options.get("max_in_flight") is not None:
            pytest.skip("sluice.aio has no per-handle max_in_flight (ConfigurationError)")
        return self._queue(self._loop.run(self.async_db.queue(name, **options)))

    def queues(self) -> Any:
        return self._loop.run(self.async_db.queues())

    def alter_queue(self, name: str, **changes: Any) -> Any:
        return self._loop.run(self.async_db.alter_queue(name, **changes))

    def drop_queue(self, name: str) -> None:
        self._loop.run(self.async_db.drop_queue(name))

    def recover(self) -> list[int]:
        return self._loop.run(self.async_db.recover())

    def begin(self, **options: Any) -> Transaction:
        if options.get("connection") is not None:
            pytest.skip("sluice.aio has no transaction(connection=...) (ConfigurationError)")
        return Transaction(self._loop, self.async_db.begin(**options))

    def transaction(self, **options: Any) -> Transaction:
        return self.begin(**options)

    def close(self) -> None:
        self._loop.run(self.async_db.close())
