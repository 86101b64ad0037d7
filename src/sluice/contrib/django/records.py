"""How a Django task lives in sluice: a job of one task, and its result read back.

A ``Task.enqueue`` submits a sluice job (docs/jobs.md) named by the task's path, with
one task of the queue's task type. The call (path, arguments, queue, priority,
``run_after``, backend alias, enqueue time) is the task message's body, for the worker,
and the job's ``info``, for ``get_result`` after the message is gone. The outcome is the
finished task's record note, written in the same commit that settles the task: the
return value, or the exception's class and traceback, and the worker that ran it. So a
result never says SUCCESSFUL for work whose commit was lost, and needs no table of its
own: sluice's job retention keeps and deletes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

import sluice
from sluice.contrib.django.api import (
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    get_module_path,
)

__all__ = [
    "INFO_KEY",
    "FinishedRecord",
    "JobView",
    "RunsUsedUp",
    "call_of",
    "moment",
    "outcome_note",
    "result_of",
    "task_of",
]

INFO_KEY = "django_task"
"""The key of a job's info that holds the call: what marks a job as a Django task's."""


class RunsUsedUp(sluice.JobError):
    """Every run a task was allowed ended without an outcome (a killed worker, a timeout).

    The error of such a FAILED result: its ``traceback`` is sluice's note of the last run.
    """


class FinishedRecord(Protocol):
    """What a result reads of a finished task's record (``sluice.jobs.TaskRecord``)."""

    @property
    def success(self) -> bool: ...
    @property
    def note(self) -> str | None: ...
    @property
    def started_at(self) -> float: ...
    @property
    def ended_at(self) -> float: ...


class JobView(Protocol):
    """What a result reads of a job (``sluice.jobs.JobStatus``)."""

    @property
    def id(self) -> str: ...
    @property
    def info(self) -> Any: ...
    @property
    def created_at(self) -> float: ...
    @property
    def ended_at(self) -> float | None: ...
    @property
    def failed(self) -> int: ...
    @property
    def running(self) -> int: ...
    @property
    def tasks(self) -> Sequence[FinishedRecord]: ...


def moment(seconds: float | None) -> datetime | None:
    """Epoch seconds as Django shows times: aware UTC with USE_TZ, naive local without."""
    if seconds is None:
        return None
    aware = datetime.fromtimestamp(seconds, UTC)
    return aware if settings.USE_TZ else timezone.make_naive(aware)


def call_of(
    task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any], alias: str, now: float
) -> dict[str, Any]:
    """The stored call: JSON that rebuilds the task and its arguments anywhere."""
    run_after = task.run_after
    return {
        "task": get_module_path(task.func),
        "args": list(args),
        "kwargs": dict(kwargs),
        "queue_name": task.queue_name,
        "priority": task.priority,
        "run_after": None if run_after is None else when(run_after),
        "backend": alias,
        "enqueued_at": now,
    }


def when(value: datetime) -> float:
    """Epoch seconds of ``run_after``; a naive one is in Django's current time zone."""
    if timezone.is_naive(value):
        value = timezone.make_aware(value)
    return value.timestamp()


def task_of(call: Mapping[str, Any]) -> Task[Any, Any]:
    """The Django task a stored call names, with the options it was enqueued with."""
    found = import_string(str(call["task"]))
    if not isinstance(found, Task):
        raise TypeError(f"{call['task']!r} is not a Django task (decorate it with @task)")
    run_after = call.get("run_after")
    return found.using(
        priority=int(call["priority"]),
        queue_name=str(call["queue_name"]),
        run_after=None if run_after is None else moment(float(run_after)),
        backend=str(call["backend"]),
    )


def outcome_note(worker: str, *, value: Any = None, error: tuple[str, str] | None = None) -> str:
    """A finished task's record note: its return value, or ``error`` (class path, traceback)."""
    if error is None:
        return json.dumps({"worker": worker, "return": value})
    return json.dumps({"worker": worker, "error": {"class": error[0], "traceback": error[1]}})


def result_of(job: JobView) -> TaskResult[Any]:
    """The Django result of a job that holds a Django task; TaskResultDoesNotExist if none."""
    info = job.info
    call = info.get(INFO_KEY) if isinstance(info, dict) else None
    if not isinstance(call, dict):
        raise TaskResultDoesNotExist(f"{job.id!r} is a sluice job, not a Django task's")
    record = job.tasks[-1] if job.tasks else None
    outcome = _outcome(record.note) if record is not None else {}
    if job.ended_at is not None:
        status = TaskResultStatus.FAILED if job.failed else TaskResultStatus.SUCCESSFUL
    elif job.running:
        status = TaskResultStatus.RUNNING
    else:  # waiting, or back in its queue after a run that never finished
        status = TaskResultStatus.READY
    started = moment(record.started_at) if record is not None else None
    result: TaskResult[Any] = TaskResult(
        task=task_of(call),
        id=job.id,
        status=status,
        enqueued_at=moment(float(call["enqueued_at"])),
        started_at=started,
        finished_at=moment(job.ended_at),
        last_attempted_at=started,
        args=call["args"],
        kwargs=call["kwargs"],
        backend=str(call["backend"]),
        errors=_errors(record, outcome) if status == TaskResultStatus.FAILED else [],
        worker_ids=[str(outcome["worker"])] if "worker" in outcome else [],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", outcome.get("return"))
    return result


def _outcome(note: str | None) -> dict[str, Any]:
    """The note the runner wrote, or nothing (a note of sluice's own: runs used up)."""
    try:
        found = json.loads(note or "")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _errors(record: FinishedRecord | None, outcome: Mapping[str, Any]) -> list[TaskError]:
    error = outcome.get("error")
    if isinstance(error, dict):
        return [
            TaskError(exception_class_path=str(error["class"]), traceback=str(error["traceback"]))
        ]
    note = record.note if record is not None else None
    return [
        TaskError(
            exception_class_path=get_module_path(RunsUsedUp),
            traceback=f"{RunsUsedUp.__name__}: {note or 'the task never finished a run'}",
        )
    ]
