"""The Celery application the worker tests run: a worker started with ``-A`` on this
module, and the test process as its producer. Its broker is ``SLUICE_TEST_BROKER``
(``SLUICE_TEST_TRANSPORT_OPTIONS``, JSON: its ``broker_transport_options``); each task
writes what it does to ``SLUICE_TEST_TASK_LOG`` (one appended line, so that processes
killed mid-task leave whole lines). A worker started with ``SLUICE_TEST_HOLD_FROM=k``
never finishes task k or a later one: a test that kills it once such a task has
started knows the kill lands mid-task, however slow the machine."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from celery import Celery

import sluice.contrib.kombu  # noqa: F401  (registers sluice+... broker URLs)


def make_app(broker: str, transport_options: dict[str, Any] | None = None) -> Celery:
    app = Celery("sluice_celery_test", broker=broker)
    app.conf.update(
        broker_transport_options=transport_options or {},
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    app.task(name="work")(work)
    return app


def record(line: str) -> None:
    fd = os.open(os.environ["SLUICE_TEST_TASK_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def work(n: int, seconds: float) -> int:
    """The task: records its start (with its process) and its end."""
    record(f"start {n} {os.getpid()}")
    hold = os.environ.get("SLUICE_TEST_HOLD_FROM")
    while hold is not None and n >= int(hold):
        time.sleep(1)  # until the test kills this worker
    time.sleep(seconds)
    record(f"done {n}")
    return n


app = make_app(
    os.environ.get("SLUICE_TEST_BROKER", "sluice+memory://"),
    json.loads(os.environ.get("SLUICE_TEST_TRANSPORT_OPTIONS", "{}")),
)
