"""What a task function is given: the task, and a way to make work that commits with it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Unpack

from sluice.backends.base import Effect
from sluice.engine.enqueue import EnqueueOptions
from sluice.engine.transaction import Transaction
from sluice.jobs.model import FAR
from sluice.jobs.submit import JobHeader, TaskSpec, enqueue_tasks
from sluice.message import Body, Message

if TYPE_CHECKING:
    from sluice.clock import Clock
    from sluice.jobs.catalog import TaskTypes
    from sluice.jobs.model import TaskType

__all__ = ["Task", "TaskFunction", "TaskOptions"]


class Task:
    """One run of a task, given to its function.

    Everything done through ``transaction`` (and ``enqueue``/``submit``)
    commits together with the task's completion, or not at all: if the
    function raises, it is rolled back and the task retried.
    """

    def __init__(
        self,
        message: Message,
        task_type: TaskType,
        transaction: Transaction,
        types: TaskTypes,
        clock: Clock,
    ) -> None:
        self.message = message
        self.task_type = task_type
        self.transaction = transaction
        self._types = types
        self._clock = clock
        self.success = True
        self.note: str | None = None

    @property
    def id(self) -> str:
        return self.message.id

    @property
    def body(self) -> Body:
        return self.message.body

    @property
    def job(self) -> str | None:
        """The id of the task's job, or None for a task submitted alone."""
        job = self.message.properties.get("job")
        return job if isinstance(job, str) else None

    @property
    def attempts(self) -> int:
        """Earlier runs of this task that did not finish (0 on the first run)."""
        return self.message.attempts

    def enqueue(self, queue: str, body: Body, **options: Unpack[EnqueueOptions]) -> str:
        """Enqueue a message that is sent only if this task completes."""
        return self.transaction.enqueue(queue, body, **options)

    def submit(self, task_type: str, body: Body = None, *, same_job: bool = True) -> str:
        """A follow-up task, submitted only if this task completes; part of this job by default."""
        job_id = self.job if same_job else None
        props = self.message.properties
        header = JobHeader(
            job_id,
            int(_number(props.get("job_priority"), 0)) if job_id else 0,
            _deadline(props.get("job_deadline")) if job_id else None,
        )
        (task_id,) = enqueue_tasks(
            self.transaction, self._types, self._clock, header, [TaskSpec(task_type, body)]
        )
        if job_id is not None:
            self.transaction.add_effect(Effect("job_add_tasks", {"id": job_id, "count": 1}))
        return task_id

    def fail(self, note: str) -> None:
        """Finish this task as done but not successful (no retry), with ``note`` saying why."""
        self.success = False
        self.note = note

    def record(self, note: str) -> None:
        """Keep ``note`` with the task's record (success stays as it is)."""
        self.note = note


def _number(value: Any, default: float) -> float:
    return float(value) if isinstance(value, int | float) else default


def _deadline(value: Any) -> float | None:
    number = _number(value, FAR)
    return None if number >= FAR else number


TaskFunction = Callable[[Task], Any]


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """A registered function and the task type it runs."""

    function: TaskFunction
    task_type: str
