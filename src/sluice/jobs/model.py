"""Task types, jobs and finished tasks as users see them (frozen value objects)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from sluice.errors import ConfigurationError

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_BACKOFF_MAX",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_RETENTION",
    "FAR",
    "JobRow",
    "JobStatus",
    "MetricRow",
    "ScheduleRow",
    "TaskRecord",
    "TaskRow",
    "TaskType",
    "TaskTypeRow",
    "WindowRow",
]

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF = 1.0
"""Seconds before the first retry; each further retry waits twice as long."""
DEFAULT_BACKOFF_MAX = 3600.0
DEFAULT_RETENTION = 7 * 86400.0
"""Seconds a finished job and its task records are kept after it ends."""
FAR = 1e15
"""The deadline of what has none: sorts after every real one, on every engine alike."""

JobState = Literal["pending", "running", "done", "failed"]


# The rows of the jobs statements (sluice/sql/<dialect>/jobs.sql), named by their columns.
class TaskTypeRow(NamedTuple):
    """A row of ``task_types``."""

    name: str
    queue: str
    priority: int
    duration: float | None
    max_attempts: int
    backoff: float
    backoff_max: float
    timeout: float | None
    retention: float | None
    profile: str | None


class JobRow(NamedTuple):
    """A row of ``job_columns`` and ``job_list``."""

    id: str
    name: str
    job_type: str | None
    priority: int
    deadline: float | None
    owner: str | None
    info: str
    alert_queue: str | None
    retention: float | None
    total: int
    succeeded: int
    failed: int
    created_at: float
    started_at: float | None
    ended_at: float | None
    alerted_at: float | None


class TaskRow(NamedTuple):
    """A row of ``job_tasks``: a finished task's record."""

    task: str
    task_type: str
    success: int
    note: str | None
    attempts: int
    started_at: float
    ended_at: float


class ScheduleRow(NamedTuple):
    """A row of ``schedule_list`` and ``schedules_due``."""

    name: str
    task_type: str
    cron: str
    tz: str
    args: str
    next_due: float


class MetricRow(NamedTuple):
    """A row of ``metric_get``: a load signal's last reported value."""

    value: float
    at: float


class WindowRow(NamedTuple):
    """A row of ``window_used``: starts counted in one rate window."""

    kind: str
    start: float
    used: int


@dataclass(frozen=True, slots=True)
class TaskType:
    """A kind of task: its defaults and the queue its tasks wait in.

    ``duration``: seconds from submission to a task's deadline (None: no
    deadline); ``backoff``: seconds before the first retry, doubling up to
    ``backoff_max``; ``timeout``: seconds a run may take (None: no limit);
    ``retention``: seconds the record of a finished task without a job is kept
    (0, the default: none is kept; a failed one is still in the error queue).
    """

    name: str
    queue: str
    priority: int = 0
    duration: float | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: float = DEFAULT_BACKOFF
    backoff_max: float = DEFAULT_BACKOFF_MAX
    timeout: float | None = None
    retention: float | None = 0.0
    profile: str | None = None
    """The throughput profile as JSON (sluice.jobs.profiles.Profile.to_json)."""

    def __post_init__(self) -> None:
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ConfigurationError(f"priority must be an int, not {self.priority!r}")
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1, not {self.max_attempts!r}")
        for name in ("duration", "timeout", "retention"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int | float) or value < 0):
                raise ConfigurationError(f"{name} must be seconds >= 0 or None, not {value!r}")
        if self.backoff < 0 or self.backoff_max < self.backoff:
            raise ConfigurationError("backoff must be >= 0 and backoff_max >= backoff")

    @property
    def error_queue(self) -> str:
        """Where the message of a task finished as failed goes: ``tasks.<name>.failed``."""
        return f"{self.queue}.failed"

    def retry_delay(self, attempts: int) -> float:
        """Seconds before the next try, after ``attempts`` failed ones (1, 2, ...)."""
        return float(min(self.backoff * 2 ** max(attempts - 1, 0), self.backoff_max))

    @classmethod
    def from_row(cls, row: TaskTypeRow) -> TaskType:
        return cls(
            name=row.name,
            queue=row.queue,
            priority=int(row.priority),
            duration=row.duration,
            max_attempts=int(row.max_attempts),
            backoff=float(row.backoff),
            backoff_max=float(row.backoff_max),
            timeout=row.timeout,
            retention=row.retention,
            profile=row.profile,
        )

    def params(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "queue": self.queue,
            "priority": self.priority,
            "duration": self.duration,
            "max_attempts": self.max_attempts,
            "backoff": float(self.backoff),
            "backoff_max": float(self.backoff_max),
            "timeout": self.timeout,
            "retention": self.retention,
            "profile": self.profile,
        }


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A finished task: done, and whether it logically succeeded, kept apart from each other."""

    task: str
    task_type: str
    success: bool
    note: str | None
    attempts: int
    started_at: float
    ended_at: float

    @classmethod
    def from_row(cls, row: TaskRow) -> TaskRecord:
        return cls(
            row.task,
            row.task_type,
            bool(row.success),
            row.note,
            int(row.attempts),
            float(row.started_at),
            float(row.ended_at),
        )


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job and the roll-up of its tasks, as of the moment it was read."""

    id: str
    name: str
    job_type: str | None
    priority: int
    deadline: float | None
    owner: str | None
    info: Any
    alert_queue: str | None
    total: int
    succeeded: int
    failed: int
    running: int
    waiting: int
    created_at: float
    started_at: float | None
    ended_at: float | None
    alerted: bool
    tasks: tuple[TaskRecord, ...] = field(default=())

    @property
    def done(self) -> int:
        """Tasks finished, successfully or not."""
        return self.succeeded + self.failed

    @property
    def progress(self) -> float:
        """Fraction of the tasks finished, 0.0 to 1.0."""
        return self.done / self.total if self.total else 1.0

    @property
    def status(self) -> JobState:
        if self.ended_at is not None:
            return "failed" if self.failed else "done"
        return "running" if self.started_at is not None or self.running or self.done else "pending"

    def late(self, now: float) -> bool:
        return self.ended_at is None and self.deadline is not None and self.deadline < now

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "job_type": self.job_type,
            "status": self.status,
            "priority": self.priority,
            "deadline": _iso(self.deadline),
            "owner": self.owner,
            "info": self.info,
            "total": self.total,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "running": self.running,
            "waiting": self.waiting,
            "progress": round(self.progress, 4),
            "created_at": _iso(self.created_at),
            "started_at": _iso(self.started_at),
            "ended_at": _iso(self.ended_at),
        }

    @classmethod
    def from_rows(
        cls, row: JobRow, live: dict[str, int], tasks: tuple[TaskRecord, ...] = ()
    ) -> JobStatus:
        return cls(
            id=row.id,
            name=row.name,
            job_type=row.job_type,
            priority=int(row.priority),
            deadline=row.deadline,
            owner=row.owner,
            info=json.loads(row.info),
            alert_queue=row.alert_queue,
            total=int(row.total),
            succeeded=int(row.succeeded),
            failed=int(row.failed),
            running=live.get("running", 0),
            waiting=live.get("waiting", 0),
            created_at=float(row.created_at),
            started_at=row.started_at,
            ended_at=row.ended_at,
            alerted=row.alerted_at is not None,
            tasks=tasks,
        )


def _iso(when: float | None) -> str | None:
    return None if when is None else datetime.fromtimestamp(when, UTC).isoformat()
