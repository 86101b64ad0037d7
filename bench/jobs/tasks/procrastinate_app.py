"""The procrastinate app of the peer benchmark: psycopg connector, one async no-op task.

Workers start it with ``procrastinate --app bench.jobs.tasks.procrastinate_app.app
worker``; the parent builds its own with :func:`make_app` for the database it created.
"""

from __future__ import annotations

import os

import procrastinate

from bench.jobs.tasks import PG_DSN_ENV, QUEUE

TASK = "noop"


async def noop() -> None:
    """The benchmark's task: it does nothing (async, procrastinate's native kind of task)."""


def make_app(dsn: str) -> procrastinate.App:
    """An app on ``dsn`` with the no-op task registered as ``noop`` on queue ``bench``."""
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    app.task(name=TASK, queue=QUEUE)(noop)
    return app


app = make_app(
    os.environ.get(PG_DSN_ENV, "postgresql://postgres@127.0.0.1:5432/bench_procrastinate")
)
