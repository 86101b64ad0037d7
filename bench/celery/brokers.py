"""The brokers Celery runs on in this benchmark, each a fresh, empty place per case: a new
SQLite file, a new PostgreSQL schema, a private Redis server, a new RabbitMQ queue. Each
says what a published or acknowledged task survives, for the report."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.celery.app import OPTIONS_ENV
from bench.harness import (
    PG_CONNINFO,
    RABBIT_HOST,
    RABBIT_PASSWORD,
    RABBIT_PORT,
    RABBIT_USER,
    drop_schema,
    private_redis,
    rabbit_params,
    redis_target,
)

__all__ = ["BROKERS", "KILL_ONLY", "Broker", "Place"]

RABBIT_URL = f"amqp://{RABBIT_USER}:{RABBIT_PASSWORD}@{RABBIT_HOST}:{RABBIT_PORT}//"


@dataclass(frozen=True)
class Place:
    """Where one case runs: the broker URL and the queue, both fresh and empty."""

    url: str
    queue: str
    durability: str
    env: dict[str, str] = field(default_factory=dict)  # for the worker (its transport options)


@dataclass(frozen=True)
class Broker:
    """A broker by name; ``place(tmp_dir)`` makes a fresh one and removes it afterwards."""

    name: str
    label: str
    place: Callable[[Path], AbstractContextManager[Place]]


def _queue() -> str:
    return f"bench_celery_{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def _sluice_sqlite(tmp: Path) -> Iterator[Place]:
    from sluice.backends.sqlite_settings import SQLiteSettings

    path = tmp / f"sluice-{uuid.uuid4().hex[:8]}.db"
    yield Place(
        f"sluice+sqlite:///{path}",
        _queue(),
        f"SQLite WAL, synchronous={SQLiteSettings().synchronous} (sluice's default): every"
        " publish and every ack is a committed transaction, fsynced",
    )


@contextlib.contextmanager
def _sluice_postgresql(tmp: Path) -> Iterator[Place]:
    schema = f"bench_celery_{uuid.uuid4().hex[:8]}"
    drop_schema(PG_CONNINFO, schema)
    try:
        yield Place(
            f"sluice+{PG_CONNINFO}?schema={schema}",
            _queue(),
            "PostgreSQL synchronous_commit=on: every publish and every ack is a committed"
            " transaction (a schema bench_celery_<random> per case, dropped after it)",
        )
    finally:
        drop_schema(PG_CONNINFO, schema)


def _in_process(
    place: Callable[[Path], AbstractContextManager[Place]],
) -> Callable[[Path], AbstractContextManager[Place]]:
    """``place`` with the transport option ``consumer_process`` off in the worker: its claims
    and acks in threads of its main process, as before the consumer process (docs/celery.md)."""

    @contextlib.contextmanager
    def placed(tmp: Path) -> Iterator[Place]:
        with place(tmp) as found:
            options = json.dumps({"consumer_process": False})
            yield replace(found, env={**found.env, OPTIONS_ENV: options})

    return placed


@contextlib.contextmanager
def _redis(tmp: Path) -> Iterator[Place]:
    with private_redis("always") as url:
        target = redis_target(url, "private")
        yield Place(
            f"{url}/0",
            _queue(),
            f"private redis-server {target.version}, {target.durability}; unacked tasks in the"
            " transport's `unacked` hash, given back after visibility_timeout (3600 s)",
        )


@contextlib.contextmanager
def _rabbitmq(tmp: Path) -> Iterator[Place]:
    import pika

    queue = _queue()
    try:
        yield Place(
            RABBIT_URL,
            queue,
            "durable classic queue, persistent messages, publisher confirms (each publish waits"
            " for its confirm); a closed channel's unacked messages are requeued at once",
        )
    finally:
        conn = pika.BlockingConnection(rabbit_params())
        try:
            conn.channel().queue_delete(queue)
        finally:
            conn.close()


@contextlib.contextmanager
def _sqla(tmp: Path) -> Iterator[Place]:
    path = tmp / f"sqla-{uuid.uuid4().hex[:8]}.db"
    yield Place(
        f"sqla+sqlite:///{path}",
        _queue(),
        "SQLite through SQLAlchemy (journal_mode=delete, synchronous=FULL, the defaults): a"
        " fetch marks the row invisible and commits; the ack is not written",
    )


BROKERS: dict[str, Broker] = {
    b.name: b
    for b in (
        # The defaults: on a worker, claims and acks in its consumer process.
        Broker("sluice-sqlite", "sluice, SQLite", _sluice_sqlite),
        Broker("sluice-postgresql", "sluice, PostgreSQL", _sluice_postgresql),
        Broker(
            "sluice-sqlite-in-process",
            "sluice, SQLite, in-process (consumer_process off)",
            _in_process(_sluice_sqlite),
        ),
        Broker(
            "sluice-postgresql-in-process",
            "sluice, PostgreSQL, in-process (consumer_process off)",
            _in_process(_sluice_postgresql),
        ),
        Broker("redis", "Redis, appendfsync always", _redis),
        Broker("rabbitmq", "RabbitMQ, durable + confirms", _rabbitmq),
        Broker("sqla", "kombu SQLAlchemy, SQLite", _sqla),
    )
}
"""Every broker, in the report's order."""

KILL_ONLY = frozenset({"sqla"})
"""Brokers run only in the kill run: kombu's SQLAlchemy transport polls once a second, and
Celery's maintainers no longer support it; it is there for the loss comparison."""
