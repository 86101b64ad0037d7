"""What a worker's tasks did: counted for progress, and told in the log as Celery tells
it: a failed run at WARNING (which attempt of how many, the error), the last one at
ERROR with its traceback."""

from __future__ import annotations

import logging
import threading

from sluice.jobs.model import TaskType
from sluice.message import Message

__all__ = ["WorkerStats"]

log = logging.getLogger("sluice.worker")


class WorkerStats:
    """A worker's counts, kept as it goes: read them from a timer for progress."""

    def __init__(self) -> None:
        self.processed = 0
        """Tasks settled and committed: succeeded or finished as failed."""
        self.failed = 0
        """Tasks finished as failed and committed (``task.fail``, or no attempts left)."""
        self.errors = 0
        """Runs that raised or ran past their timeout, tried again or not."""
        self._lock = threading.Lock()
        self._told: set[str] = set()
        """Tasks whose last run failed here, told at ERROR already."""

    def committed(self, settled: int, failed: int) -> None:
        with self._lock:
            self.processed += settled
            self.failed += failed

    def run_failed(
        self, task_type: TaskType, message: Message, error: BaseException, delay: float
    ) -> None:
        """A run of ``message`` raised ``error``; it is tried again after ``delay`` s, or
        finished as failed by the next take if that was its last attempt."""
        attempt = message.attempts + 1
        text = (
            f"task {message.id} ({task_type.name}) failed, attempt {attempt} of "
            f"{task_type.max_attempts}: {type(error).__name__}: {error}"
        )
        with self._lock:
            self.errors += 1
            last = attempt >= task_type.max_attempts
            if last:
                self._told.add(message.id)
        if not last:
            log.warning("%s; tried again in %g s", text, delay)
            return
        log.error(
            "%s; no attempts left: it is finished as failed, its message moved to %r",
            text, task_type.error_queue, exc_info=error,
        )  # fmt: skip

    def finished_failed(
        self, task_type: TaskType, message: Message, note: str | None, *, used_up: bool
    ) -> None:
        """``message``'s task is being finished as failed: by ``task.fail(note)``, or
        (``used_up``) because its runs are used up."""
        name = f"task {message.id} ({task_type.name})"
        if not used_up:
            log.warning("%s failed: %s (task.fail: not tried again)", name, note)
            return
        with self._lock:
            told = message.id in self._told
            self._told.discard(message.id)
        if told:  # its last run's error, with its traceback, was told at ERROR
            log.info("%s finished as failed; its message is in %r", name, task_type.error_queue)
            return
        # Its last run did not end here (a killed worker, a lost lease): no traceback.
        log.error(
            "%s failed: no attempts left after %d runs (%s); its message moved to %r",
            name, message.attempts, note, task_type.error_queue,
        )  # fmt: skip
