"""Task types in the database: each maps onto a queue whose tasks carry job properties.

A task message's properties say which job it belongs to and how it ranks; they
are declared on the task queue, so stored in fixed slots and indexed, and the
default processing order runs inside the database like any ordering dequeue.
"""

from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING

from sluice.backends.base import Effect, JobsStatements
from sluice.errors import ConfigurationError, UnknownTaskType
from sluice.jobs.model import TaskType, TaskTypeRow

if TYPE_CHECKING:
    from sluice.engine.database import Engine

__all__ = [
    "JOB_PROPERTIES",
    "TaskTypes",
    "is_task",
    "jobs_backend",
    "processing_order",
    "property_name",
]

JOB_PROPERTIES = (
    # (property, expression, type, slot): the slots jobs.sql and the tasks index read.
    # Deadlines are stored negated, as urgencies: every key of the processing order is
    # then descending, the one direction that a SQLite index serves with NULLs last.
    ("job", "props.job", "text", "t1"),
    ("job_priority", "props.job_priority", "number", "n1"),
    ("job_urgency", "0 - props.job_deadline", "number", "n2"),
    ("urgency", "0 - props.deadline", "number", "n3"),
    ("task_priority", "props.priority", "number", "n4"),
)


def property_name(name: str, queue: str) -> str:
    """The declared property ``name`` of a task queue: one per queue, as selections name it."""
    return f"{name}__{re.sub(r'[^A-Za-z0-9_]', '_', queue)}"


def processing_order(queue: str) -> list[str]:
    """Job priority, then job deadline, then task priority, then task deadline."""
    return [
        f"{property_name('job_priority', queue)} DESC",
        f"{property_name('job_urgency', queue)} DESC",
        f"{property_name('task_priority', queue)} DESC",
        f"{property_name('urgency', queue)} DESC",
    ]


def is_task(queue: str) -> str:
    """The condition that lets a claim use the tasks index (every task message meets it)."""
    return f"{property_name('job_priority', queue)} IS NOT NULL"


_TTL = 1.0  # task types changed by another process are seen within this time


def jobs_backend(db: Engine) -> JobsStatements:
    """The statements jobs run: every backend has them (``JobsStatements``)."""
    return db.backend


class TaskTypes:
    """The task types of one database, read through a short-lived cache."""

    def __init__(self, db: Engine) -> None:
        self._db = db
        self._cache: dict[str, TaskType] = {}
        self._read_at = 0.0
        self._lock = threading.Lock()

    def define(self, task_type: TaskType) -> TaskType:
        """Create or update a task type and its queue (idempotent)."""
        db = self._db
        db.create_queue(task_type.queue, error_queue=task_type.error_queue, exist_ok=True)
        self._declare_properties(task_type.queue)
        jobs_backend(db).jobs_write([Effect("task_type_upsert", task_type.params())])
        self.refresh()
        return self.get(task_type.name)

    def _declare_properties(self, queue: str) -> None:
        have = {p.expression: p.slot for p in self._db.backend.queue_properties(queue)}
        for name, expression, kind, slot in JOB_PROPERTIES:
            if expression in have:
                if have[expression] != slot:
                    raise ConfigurationError(
                        f"queue {queue!r} stores {expression} in {have[expression]}, not {slot}: "
                        "a task queue must be created by sluice.jobs; use a new queue name"
                    )
                continue
            # The job is looked up by value; the rest only orders, through messages_tasks.
            self._db.create_property(
                property_name(name, queue), expression, queues=[queue], type=kind,
                indexed=name == "job",
            )  # fmt: skip
        have = {p.expression: p.slot for p in self._db.backend.queue_properties(queue)}
        wrong = [e for _, e, _, s in JOB_PROPERTIES if have.get(e) != s]
        if wrong:
            raise ConfigurationError(
                f"queue {queue!r} already had declared properties, so {', '.join(wrong)} "
                "could not take the slots jobs need; use a new queue name for the task type"
            )

    def set_profile(self, name: str, profile_json: str | None) -> None:
        self.get(name)
        jobs_backend(self._db).jobs_write(
            [Effect("task_type_profile", {"name": name, "profile": profile_json}, expect=1)]
        )
        self.refresh()

    def refresh(self) -> None:
        rows = jobs_backend(self._db).jobs_read("task_types", {})
        with self._lock:
            self._cache = {row.name: TaskType.from_row(row) for row in map(TaskTypeRow._make, rows)}
            self._read_at = time.monotonic()

    def get(self, name: str) -> TaskType:
        if time.monotonic() - self._read_at > _TTL or name not in self._cache:
            self.refresh()
        found = self._cache.get(name)
        if found is None:
            raise UnknownTaskType(
                f"task type {name!r} is not defined; define it with db.jobs.define({name!r}) "
                "or register a function for it with @db.task"
            )
        return found
