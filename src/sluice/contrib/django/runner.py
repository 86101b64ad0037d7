"""Running a Django task inside sluice's worker runtime.

sluice's worker (docs/jobs.md: profiles, deadlines, adaptive batches, a killed worker's
tasks back at once) calls one function per task type; here it is the same for every
queue: rebuild the Django task from the stored call, run it as Django's own backends
do (context, coroutines, the ``task_started``/``task_finished`` signals), and leave the
outcome as the task's record note, which commits with the task. A task that raises is
FAILED at once, as Django has it (no retry); only runs that never finish (a killed
worker, a timeout) are run again, up to ``max_attempts`` runs.
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from django.db import close_old_connections
from django.utils import timezone

import sluice
from sluice.contrib.django.api import (
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    get_module_path,
    normalize_json,
    task_finished,
    task_started,
)
from sluice.contrib.django.records import moment, outcome_note, task_of

__all__ = ["Run", "Runner", "Worker", "WorkerStats", "worker_id"]


class Run(Protocol):
    """What the runner uses of the task sluice gives it (``sluice.jobs.Task``)."""

    @property
    def id(self) -> str: ...
    @property
    def job(self) -> str | None: ...
    @property
    def body(self) -> Any: ...
    def record(self, note: str) -> None: ...
    def fail(self, note: str) -> None: ...


class WorkerStats(Protocol):
    """A worker's counts (``sluice.jobs.Worker.stats``)."""

    @property
    def processed(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def errors(self) -> int: ...


class Worker(Protocol):
    """What callers use of a sluice worker (``sluice.jobs.Worker``)."""

    concurrency: int

    @property
    def stats(self) -> WorkerStats: ...
    def run(self) -> None: ...
    def run_until_idle(self, max_tasks: int | None = None) -> int: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def join(self) -> None: ...


def worker_id() -> str:
    """This process as a task result's ``worker_ids`` name it: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"[:64]


class Runner:
    """The task function of every Django queue's task type (one per process)."""

    def __init__(self, sender: type, worker: str) -> None:
        self._sender = sender  # the backend class, as Django's backends send signals
        self._worker = worker

    def __call__(self, run: Run) -> None:
        call: dict[str, Any] = run.body
        # A task's database connections are the thread's; those past CONN_MAX_AGE or
        # broken go before and after each task, as after each request.
        close_old_connections()
        try:
            self._run(run, call)
        finally:
            close_old_connections()

    def _run(self, run: Run, call: dict[str, Any]) -> None:
        started = timezone.now()
        try:
            task = task_of(call)
        except Exception as exc:  # the code changed since it was enqueued
            run.fail(outcome_note(self._worker, error=_error(exc)))
            return
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=run.job or run.id,
            status=TaskResultStatus.RUNNING,
            enqueued_at=moment(float(call["enqueued_at"])),
            started_at=started,
            finished_at=None,
            last_attempted_at=started,
            args=call["args"],
            kwargs=call["kwargs"],
            backend=str(call["backend"]),
            errors=[],
            worker_ids=[self._worker],
        )
        task_started.send(sender=self._sender, task_result=result)
        try:
            function: Callable[..., Any] = task.call
            if task.takes_context:
                value = function(TaskContext(task_result=result), *result.args, **result.kwargs)
            else:
                value = function(*result.args, **result.kwargs)
            value = normalize_json(value)
        except sluice.TaskTimeout:
            raise  # sluice's own interruption: rolled back and run again
        except Exception as exc:
            error = _error(exc)
            _set(result, status=TaskResultStatus.FAILED, finished_at=timezone.now())
            result.errors.append(TaskError(exception_class_path=error[0], traceback=error[1]))
            run.fail(outcome_note(self._worker, error=error))
        else:
            _set(result, status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now())
            _set(result, _return_value=value)
            run.record(outcome_note(self._worker, value=value))
        task_finished.send(sender=self._sender, task_result=result)


def _error(exc: BaseException) -> tuple[str, str]:
    return get_module_path(type(exc)), "".join(traceback.format_exception(exc))


def _set(result: TaskResult[Any], **values: Any) -> None:
    # TaskResult is frozen; Django's own backends update it the same way.
    for name, value in values.items():
        object.__setattr__(result, name, value)
