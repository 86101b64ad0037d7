"""``sluice.Database``: the queue engine with the features built on it (jobs and tasks).

The engine knows nothing of its features; they attach here, from above, so
the engine's modules import none of them (the import-layers contract in
``make test`` keeps it so).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from sluice.backends.base import Backend
from sluice.catalog import DEFAULT_MAX_SIZE
from sluice.clock import Clock
from sluice.engine.database import DEFAULT_LEASE, DEFAULT_POLL_INTERVAL, Engine
from sluice.errors import UnknownTaskType

if TYPE_CHECKING:
    from sluice.gateways.manager import Gateways
    from sluice.jobs.manager import Jobs
    from sluice.jobs.task import TaskFunction
    from sluice.jobs.worker import Worker
    from sluice.rules.engine import Rules
    from sluice.rules.model import Application

# The features (rules, gateways, jobs) are imported when first used, not with sluice:
# a program that only puts and gets, a Celery worker's consumer process, a Spark
# worker, or a one-line CLI command would otherwise load the rules language, the
# gateways' senders and the job scheduler (about a third of `import sluice`).

__all__ = ["Database"]


class Database(Engine):
    """A connection to sluice queues. Thread-safe; close it (or use ``with``) when done."""

    def __init__(
        self,
        backend: Backend,
        *,
        lease: float = DEFAULT_LEASE,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_message_size: int = DEFAULT_MAX_SIZE,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(
            backend,
            lease=lease,
            poll_interval=poll_interval,
            max_message_size=max_message_size,
            clock=clock,
        )
        self._jobs: Jobs | None = None
        self._jobs_lock = threading.Lock()
        self._task_functions: dict[str, TaskFunction] = {}
        self._rules: Rules | None = None
        self._gateways: Gateways | None = None

    def __enter__(self) -> Database:
        return self

    # --- declarative rules (docs/rules.md) --------------------------------------------
    @property
    def rules(self) -> Rules:
        """The rules application of this database: ``apply``, ``run``, ``run_until_idle``."""
        gateways = self.gateways  # (its own turn of the lock)
        with self._jobs_lock:
            if self._rules is None:
                from sluice.rules.engine import Rules  # noqa: PLC0415  (loaded when first used)

                self._rules = Rules(self, check_gateway=gateways.check_definition)
            return self._rules

    def apply(self, text: str) -> Application:
        """Apply a rules definition (docs/rules.md); the same as ``db.rules.apply(text)``."""
        return self.rules.apply(text)

    # --- gateway queues (docs/gateways.md) ----------------------------------------------
    @property
    def gateways(self) -> Gateways:
        """The gateway queues of this database: ``define``, ``list``, ``drop``, ``start``."""
        with self._jobs_lock:
            if self._gateways is None:
                from sluice.gateways.manager import Gateways  # noqa: PLC0415  (as Rules)

                self._gateways = Gateways(self)
            return self._gateways

    def close(self) -> None:
        """Stop the rules engine and the gateways if they run here, then end the session.
        Idempotent."""
        if self._rules is not None:
            self._rules.stop()
        if self._gateways is not None:
            self._gateways.stop()
        super().close()

    # --- jobs and tasks (docs/jobs.md) -------------------------------------------------
    @property
    def jobs(self) -> Jobs:
        """Task types, profiles, jobs, schedules and alerts of this database."""
        with self._jobs_lock:
            if self._jobs is None:
                from sluice.jobs.manager import Jobs  # noqa: PLC0415  (as Rules)

                self._jobs = Jobs(self)
            return self._jobs

    @property
    def task_functions(self) -> Mapping[str, TaskFunction]:
        """The functions registered with ``@db.task`` in this process, by task type."""
        return dict(self._task_functions)

    def task(
        self,
        name: str,
        *,
        queue: str | None = None,
        priority: int = 0,
        duration: float | None = None,
        max_attempts: int | None = None,
        backoff: float | None = None,
        timeout: float | None = None,
        retention: float | None = 0.0,
    ) -> Callable[[TaskFunction], TaskFunction]:
        """Register the decorated function to run tasks of type ``name`` (defining the type).

        The function gets a ``sluice.jobs.Task``; options as for ``db.jobs.define``
        (left out: its defaults). Workers of this process run it: ``db.worker()``.
        """

        from sluice.jobs import model  # noqa: PLC0415  (as Rules)

        def register(function: TaskFunction) -> TaskFunction:
            self.jobs.define(
                name,
                queue=queue,
                priority=priority,
                duration=duration,
                max_attempts=model.DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts,
                backoff=model.DEFAULT_BACKOFF if backoff is None else backoff,
                timeout=timeout,
                retention=retention,
            )
            self._task_functions[name] = function
            return function

        return register

    def worker(
        self,
        *,
        tasks: Sequence[str] | None = None,
        concurrency: int = 1,
        batch: int | None = None,
        poll: float | None = None,
        grace: float | None = None,
        signals: Mapping[str, Callable[[], float]] | None = None,
    ) -> Worker:
        """A worker for the task functions registered with ``@db.task`` (or those of ``tasks``).

        ``worker.run()`` works until stopped (SIGTERM/SIGINT in the main thread
        finish the tasks in hand first); ``start()``/``stop()``/``join()`` run
        it in the background; ``run_until_idle()`` in the calling thread.
        ``batch``: tasks a thread takes and settles in one transaction (one
        fsync for all; a task that fails is given back alone); by default
        (None) adaptive: one at first, more while tasks are ready and a batch
        runs in under ``ADAPTIVE_BUDGET`` seconds (docs/jobs.md); ``signals``:
        load signals by name, for load-following profiles.
        """
        names = list(self._task_functions) if tasks is None else list(tasks)
        missing = [n for n in names if n not in self._task_functions]
        if missing:
            raise UnknownTaskType(
                f"no function registered for task type {', '.join(map(repr, missing))}: "
                "decorate one with @db.task(name) in this process"
            )
        from sluice.jobs.worker import DEFAULT_GRACE, DEFAULT_POLL, Worker  # noqa: PLC0415

        return Worker(
            self,
            self.jobs,
            {n: self._task_functions[n] for n in names},
            concurrency=concurrency,
            batch=batch,
            poll=DEFAULT_POLL if poll is None else poll,
            grace=DEFAULT_GRACE if grace is None else grace,
            signals=dict(signals or {}),
        )
