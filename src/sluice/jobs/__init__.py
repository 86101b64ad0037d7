"""Jobs, tasks, time-of-week throughput profiles and the worker runtime (docs/jobs.md).

Its names load when first used (``sluice.jobs.Worker``, ``db.jobs``): ``import sluice``
needs only ``TaskSpec``, and a program without jobs never loads the scheduler.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.jobs.clock import Clock, FastClock, ManualClock, SystemClock
    from sluice.jobs.manager import Jobs
    from sluice.jobs.model import JobStatus, TaskRecord, TaskType
    from sluice.jobs.submit import TaskSpec
    from sluice.jobs.task import Task
    from sluice.jobs.worker import Worker, WorkerShutdown

__all__ = [
    "Clock",
    "FastClock",
    "JobStatus",
    "Jobs",
    "ManualClock",
    "SystemClock",
    "Task",
    "TaskRecord",
    "TaskSpec",
    "TaskType",
    "Worker",
    "WorkerShutdown",
]

_HOME = {
    "Clock": "clock",
    "FastClock": "clock",
    "ManualClock": "clock",
    "SystemClock": "clock",
    "Jobs": "manager",
    "JobStatus": "model",
    "TaskRecord": "model",
    "TaskType": "model",
    "TaskSpec": "submit",
    "Task": "task",
    "Worker": "worker",
    "WorkerShutdown": "worker",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'sluice.jobs' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"sluice.jobs.{home}"), name)
    globals()[name] = value  # later uses find it without this call, as in sluice.expr
    return value
