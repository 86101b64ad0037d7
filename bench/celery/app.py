"""The Celery app of the benchmark: the workers run it (``celery -A bench.celery.app worker``)
and the parent enqueues through :func:`make_app` with the same settings, so that every broker
gets the same configuration but for its transport options.

One task, ``probe(no, sent, seconds)``: it stamps its start into the sink, sleeps ``seconds``
(0: a no-op) and stamps its end. The workers find the broker, queue and sink in the
environment (``BENCH_CELERY_BROKER``, ``BENCH_CELERY_QUEUE``, ``BENCH_CELERY_SINK``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from celery import Celery

from bench.celery.sink import SinkWriter

__all__ = [
    "BROKER_ENV",
    "OPTIONS_ENV",
    "PREFETCH",
    "QUEUE_ENV",
    "SINK_ENV",
    "TASK",
    "make_app",
    "transport_options",
]

BROKER_ENV = "BENCH_CELERY_BROKER"
QUEUE_ENV = "BENCH_CELERY_QUEUE"
SINK_ENV = "BENCH_CELERY_SINK"
OPTIONS_ENV = "BENCH_CELERY_TRANSPORT_OPTIONS"  # JSON: transport options added to the broker's
TASK = "probe"
PREFETCH = 4  # Celery's default worker_prefetch_multiplier, for every broker


def transport_options(broker_url: str) -> dict[str, Any]:
    """RabbitMQ confirms each publish (the producer waits until it is on disk); the other
    transports take their defaults, but for what the case sets in ``OPTIONS_ENV`` (sluice's
    consumer process)."""
    options: dict[str, Any] = json.loads(os.environ.get(OPTIONS_ENV, "{}"))
    if broker_url.startswith("amqp"):
        options["confirm_publish"] = True
    return options


_WRITER = SinkWriter(Path(os.environ[SINK_ENV])) if SINK_ENV in os.environ else None


def probe(no: int, sent: float, seconds: float) -> None:
    """The benchmark's task: stamp its start, sleep ``seconds`` (0: none), stamp its end."""
    if _WRITER is None:
        raise RuntimeError(f"no sink: set {SINK_ENV} for the worker that runs {TASK}")
    _WRITER.started(no, sent, time.time())
    if seconds:
        time.sleep(seconds)
    _WRITER.finished(no, time.time())


def make_app(broker_url: str, queue: str) -> Any:
    """A Celery app on ``broker_url`` with ``probe`` registered and ``queue`` its default."""
    if broker_url.startswith("sluice+"):
        import sluice.contrib.kombu  # noqa: F401  registers the sluice+... transport aliases
    app = Celery("sluice_bench_celery", broker=broker_url, set_as_current=False)
    app.conf.update(
        broker_transport_options=transport_options(broker_url),
        # Acknowledged after the task ran, and given back if its pool process dies, so that a
        # killed worker's task runs again: the at-least-once that every broker is asked for.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        task_default_queue=queue,
        worker_prefetch_multiplier=PREFETCH,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    app.task(name=TASK)(probe)
    return app


app = make_app(os.environ.get(BROKER_ENV, "memory://"), os.environ.get(QUEUE_ENV, "bench_celery"))
