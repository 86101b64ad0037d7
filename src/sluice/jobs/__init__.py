"""Jobs, tasks, time-of-week throughput profiles and the worker runtime (docs/jobs.md)."""

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
