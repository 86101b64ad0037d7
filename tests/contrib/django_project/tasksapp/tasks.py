"""The test project's tasks: module-level functions decorated with Django's ``@task``."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.contrib.django.api import TaskContext

if TYPE_CHECKING:  # mypy reads the backport, as sluice.contrib.django.api does
    from django_tasks import task
else:
    try:
        from django.tasks import task  # Django 6
    except ImportError:
        from django_tasks import task

RAN: list[str] = []
"""Names of the ``record`` tasks in the order they ran (in-process workers)."""
GATE = threading.Event()
"""``wait_for_gate`` runs until this is set (in-process workers)."""
ENTERED = threading.Event()


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def record(name: str) -> str:
    RAN.append(name)
    return name


@task()
def fail(message: str) -> None:
    raise ValueError(message)


@task()
def unserialisable() -> Any:
    return object()


@task()
async def async_add(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def who_am_i(context: TaskContext, tag: str) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "tag": tag}


@task()
def wait_for_gate() -> str:
    ENTERED.set()
    if not GATE.wait(30):
        raise TimeoutError("the test never opened the gate")
    return "through"


@task()
def hold(directory: str) -> int:
    """Mark a run as started, then finish once ``release`` exists (a worker subprocess)."""
    here = Path(directory)
    (here / f"started-{os.getpid()}").touch()
    deadline = time.monotonic() + 60
    while not (here / "release").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the task")
        time.sleep(0.01)  # a file made by another process: nothing to wait on but the file
    return os.getpid()
