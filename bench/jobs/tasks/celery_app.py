"""The Celery app of the peer benchmark: Redis broker, no result backend, late acks.

Workers start it with ``celery -A bench.jobs.tasks.celery_app worker``; the parent builds
its own app with :func:`make_app` for the broker it is measuring.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from bench.jobs.tasks import QUEUE, REDIS_URL_ENV

PREFETCH_ENV = "BENCH_CELERY_PREFETCH"
DEFAULT_PREFETCH = 4  # Celery's own default worker_prefetch_multiplier
TASK = "noop"


def noop() -> None:
    """The benchmark's task: it does nothing."""


def make_app(broker_url: str, prefetch: int = DEFAULT_PREFETCH) -> Any:
    """A Celery app on ``broker_url`` with the no-op task registered as ``noop``."""
    app = Celery("sluice_bench", broker=broker_url, set_as_current=False)
    app.conf.update(
        # Acknowledged after the task ran, so a killed worker's task is delivered again
        # (after the Redis transport's visibility timeout).
        task_acks_late=True,
        task_ignore_result=True,
        worker_prefetch_multiplier=prefetch,
        task_default_queue=QUEUE,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
    )
    app.task(name=TASK)(noop)
    return app


app = make_app(
    os.environ.get(REDIS_URL_ENV, "redis://127.0.0.1:6379/12"),
    int(os.environ.get(PREFETCH_ENV, str(DEFAULT_PREFETCH))),
)
