"""Submitting jobs and tasks: task messages with their job's properties, in one transaction."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sluice.backends.base import Effect
from sluice.engine.enqueue import check_text
from sluice.errors import ConfigurationError
from sluice.jobs.model import FAR, TaskType
from sluice.message import Body

if TYPE_CHECKING:
    from sluice.clock import Clock
    from sluice.engine.transaction import Transaction
    from sluice.jobs.catalog import TaskTypes

__all__ = ["JobHeader", "TaskSpec", "enqueue_tasks", "submit_job", "task_specs", "when"]


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task to submit: its type and body, and optionally what overrides the type's defaults.

    ``deadline`` and ``start_at``: epoch seconds or aware datetimes, by the jobs clock.
    """

    task_type: str
    body: Body = None
    priority: int | None = None
    deadline: float | datetime | None = None
    start_at: float | datetime | None = None


@dataclass(frozen=True, slots=True)
class JobHeader:
    """What a task inherits from its job."""

    id: str | None
    priority: int = 0
    deadline: float | None = None


def when(value: float | datetime | None, what: str) -> float | None:
    """Epoch seconds of a time given as a number or an aware datetime."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigurationError(f"{what} must be a timezone-aware datetime, not a naive one")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{what} must be epoch seconds or a datetime, not {value!r}")
    return float(value)


def task_specs(tasks: Iterable[TaskSpec | tuple[str, Body]]) -> list[TaskSpec]:
    specs = []
    for item in tasks:
        if isinstance(item, TaskSpec):
            specs.append(item)
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            specs.append(TaskSpec(item[0], item[1]))
        else:
            raise ConfigurationError(
                f"a task is a TaskSpec or a (task_type, body) pair, not {item!r}"
            )
    return specs


def enqueue_tasks(
    tx: Transaction,
    types: TaskTypes,
    clock: Clock,
    job: JobHeader,
    specs: Sequence[TaskSpec],
) -> list[str]:
    """Enqueue the tasks in ``tx``; runs of tasks alike are enqueued together."""
    now = clock.now()
    ids: list[str] = []
    run: list[Body] = []
    key: tuple[Any, ...] | None = None
    for spec in specs:
        task_type = types.get(spec.task_type)
        this = _options(task_type, job, spec, now)
        if this != key and run:
            ids += _enqueue(tx, job, key, run)
            run = []
        key = this
        run.append(spec.body)
    if run:
        ids += _enqueue(tx, job, key, run)
    return ids


def _options(task_type: TaskType, job: JobHeader, spec: TaskSpec, now: float) -> tuple[Any, ...]:
    deadline = when(spec.deadline, "deadline")
    if deadline is None and task_type.duration is not None:
        deadline = now + task_type.duration
    start = when(spec.start_at, "start_at")
    delay = max(0.0, start - now) if start is not None else 0.0
    priority = task_type.priority if spec.priority is None else spec.priority
    return (task_type.queue, priority, deadline, delay)


def _enqueue(
    tx: Transaction, job: JobHeader, key: tuple[Any, ...] | None, bodies: list[Body]
) -> list[str]:
    assert key is not None
    queue, priority, deadline, delay = key
    properties: dict[str, Any] = {
        "job_priority": job.priority,
        "job_deadline": FAR if job.deadline is None else job.deadline,
        "deadline": FAR if deadline is None else deadline,
        "priority": priority,  # the message's own, stored where the tasks index has it
    }
    if job.id is not None:
        properties["job"] = job.id
    return tx.enqueue_many(queue, bodies, priority=priority, properties=properties, delay=delay)


def submit_job(
    tx: Transaction,
    types: TaskTypes,
    clock: Clock,
    *,
    name: str,
    specs: Sequence[TaskSpec],
    priority: int,
    deadline: float | None,
    owner: str | None,
    info: Any,
    alert_queue: str | None,
    job_type: str | None,
    retention: float | None,
) -> str:
    """Enqueue a job's tasks and record the job, both when ``tx`` commits; the job's id."""
    if not specs:
        raise ConfigurationError("a job needs at least one task")
    if not isinstance(name, str) or not name:
        raise ConfigurationError("a job needs a name: a non-empty str")
    # NUL and lone surrogates failed in the driver (StorageError on PostgreSQL only,
    # UnicodeEncodeError everywhere): refused here, on every backend alike.
    check_text("the job's name", name)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigurationError(f"priority must be an int, not {priority!r}")
    try:
        info_text = json.dumps({} if info is None else info)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"info must be JSON-serialisable: {exc}") from None
    job = JobHeader(tx.next_message_id, priority, deadline)
    assert job.id is not None
    enqueue_tasks(tx, types, clock, job, specs)
    tx.add_effect(
        Effect(
            "job_insert",
            {
                "id": job.id,
                "name": name,
                "job_type": job_type,
                "priority": priority,
                "deadline": deadline,
                "owner": owner,
                "info": info_text,
                "alert_queue": alert_queue,
                "retention": retention,
                "total": len(specs),
                "now": clock.now(),
            },
        )
    )
    return job.id
