"""``db.jobs``: task types, profiles, job submission and status, schedules, alerts, upkeep."""

from __future__ import annotations

import builtins
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sluice.backends.base import Effect
from sluice.catalog import check_name
from sluice.clock import Clock
from sluice.engine.transaction import Transaction
from sluice.errors import ConfigurationError, Conflict, InvalidBody, JobNotFound
from sluice.jobs.catalog import TaskTypes, jobs_backend
from sluice.jobs.cron import Cron
from sluice.jobs.model import (
    DEFAULT_BACKOFF,
    DEFAULT_BACKOFF_MAX,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETENTION,
    JobRow,
    JobStatus,
    ScheduleRow,
    TaskRecord,
    TaskRow,
    TaskType,
    WindowRow,
)
from sluice.jobs.profiles import Profile
from sluice.jobs.submit import JobHeader, TaskSpec, enqueue_tasks, submit_job, task_specs, when
from sluice.message import Body

if TYPE_CHECKING:
    from sluice.engine.database import Engine

__all__ = ["Jobs"]

log = logging.getLogger("sluice.jobs")

_JOB_ID = re.compile(r"\d{1,19}/\d{1,19}/\d{1,19}")
"""A job's id: its first task message's, session/transaction/number."""
_STALE_WINDOWS = 2 * 86400.0  # rate windows older than this are deleted by upkeep
_CATCH_UP = 100  # due times of one schedule fired per upkeep pass at most

CompletionCallback = Callable[[JobStatus], None]


class Jobs:
    """Jobs and tasks of one Database (``db.jobs``); thread-safe."""

    def __init__(self, db: Engine) -> None:
        self._db = db
        self.types = TaskTypes(db)
        self._callbacks: list[CompletionCallback] = []
        self._lock = threading.Lock()

    @property
    def clock(self) -> Clock:
        """The time deadlines, profiles and schedules are judged by: the Database's clock.

        The same object as ``db.clock``, which also times messages (``start_at`` is a
        message delay); setting either sets both, for tests and demos.
        """
        return self._db.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._db.clock = clock

    # --- task types and profiles ------------------------------------------------------
    def define(
        self,
        name: str,
        *,
        queue: str | None = None,
        priority: int = 0,
        duration: float | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff: float = DEFAULT_BACKOFF,
        backoff_max: float = DEFAULT_BACKOFF_MAX,
        timeout: float | None = None,
        retention: float | None = 0.0,
    ) -> TaskType:
        """Define (or redefine) a task type; its tasks wait in ``queue`` (``tasks.<name>``).

        ``duration``: seconds from submission to a task's deadline; ``backoff``:
        seconds before the first retry, doubled for each further one up to
        ``backoff_max``; ``timeout``: real seconds a run may take; ``retention``:
        seconds a finished task without a job keeps its record (0: none kept;
        None: kept until deleted). Jobs keep their tasks' records themselves.
        A profile set earlier is kept.
        """
        # Named as queues are: with a queue of its own given, a task type's name was
        # checked by nothing (SQL, NUL, a lone surrogate or '' went on to the database).
        check_name(name, "task type")
        task_type = TaskType(
            name,
            queue or f"tasks.{name}",
            priority=priority,
            duration=duration,
            max_attempts=max_attempts,
            backoff=backoff,
            backoff_max=backoff_max,
            timeout=timeout,
            retention=retention,
        )
        return self.types.define(task_type)

    def set_profile(self, profile: Profile) -> None:
        """Limit a task type's throughput by time of week (``profile.task_type`` names it)."""
        if not isinstance(profile, Profile):
            raise ConfigurationError(
                f"set_profile takes a sluice.jobs.profiles.Profile, not {type(profile).__name__}"
            )
        self.types.set_profile(profile.task_type, profile.to_json())

    def clear_profile(self, task_type: str) -> None:
        self.types.set_profile(task_type, None)

    def profile(self, task_type: str) -> Profile | None:
        text = self.types.get(task_type).profile
        return None if text is None else Profile.from_json(text)

    # --- submitting -------------------------------------------------------------------
    def submit(
        self,
        name: str,
        tasks: Iterable[TaskSpec | tuple[str, Body]],
        *,
        priority: int = 0,
        deadline: float | datetime | None = None,
        owner: str | None = None,
        info: Any = None,
        alert_queue: str | None = None,
        job_type: str | None = None,
        retention: float | None = DEFAULT_RETENTION,
        tx: Transaction | None = None,
    ) -> str:
        """Submit a job: its tasks and its record, in one transaction; returns the job id.

        ``tasks``: ``(task_type, body)`` pairs or ``TaskSpec``s; ``deadline``:
        epoch seconds or an aware datetime, by ``db.jobs.clock``; ``info``: free
        JSON kept with the job; ``alert_queue``: where a message announces the
        job's end; ``retention``: seconds the finished job and its task records
        are kept (None: until deleted). With ``tx`` the job is part of that
        transaction and exists once it commits.
        """
        if alert_queue is not None:
            self._db.queue(alert_queue)  # QueueNotFound now rather than at the end
        specs = task_specs(tasks)
        own = tx is None
        tx = tx or self._db.begin()
        try:
            job = submit_job(
                tx,
                self.types,
                self.clock,
                name=name,
                specs=specs,
                priority=priority,
                deadline=when(deadline, "deadline"),
                owner=owner,
                info=info,
                alert_queue=alert_queue,
                job_type=job_type,
                retention=retention,
            )
        except BaseException:
            if own:
                tx.abort()
            raise
        if own:
            tx.commit()
        return job

    def submit_task(
        self,
        task_type: str,
        body: Body = None,
        *,
        priority: int | None = None,
        deadline: float | datetime | None = None,
        start_at: float | datetime | None = None,
        tx: Transaction | None = None,
    ) -> str:
        """Submit one task of no job; returns its id. ``start_at``: not to run before then."""
        return self._submit_alone([TaskSpec(task_type, body, priority, deadline, start_at)], tx)[0]

    def submit_tasks(
        self,
        task_type: str,
        bodies: Iterable[Body],
        *,
        priority: int | None = None,
        tx: Transaction | None = None,
    ) -> builtins.list[str]:
        """Submit many tasks of no job in one transaction (the fast way); their ids."""
        return self._submit_alone([TaskSpec(task_type, body, priority) for body in bodies], tx)

    def _submit_alone(
        self, specs: builtins.list[TaskSpec], tx: Transaction | None
    ) -> builtins.list[str]:
        """Tasks of no job, in ``tx`` or in a transaction of their own."""
        if tx is not None:
            return enqueue_tasks(tx, self.types, self.clock, JobHeader(None), specs)
        with self._db.transaction() as own:
            return enqueue_tasks(own, self.types, self.clock, JobHeader(None), specs)

    # --- looking ----------------------------------------------------------------------
    def get(self, job_id: str, *, tasks: bool = False) -> JobStatus:
        """A job and the roll-up of its tasks; with ``tasks`` the finished tasks' records."""
        if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
            # No job has such an id; asked of the database, a NUL in it failed there (a
            # StorageError on PostgreSQL) and a lone surrogate in the driver.
            raise JobNotFound(f"job {job_id!r} does not exist: a job's id is like '1/2/1'")
        backend = jobs_backend(self._db)
        rows = backend.jobs_read("job_columns", {"id": job_id})
        if not rows:
            raise JobNotFound(f"job {job_id!r} does not exist (or was cleaned up)")
        live = {str(k): int(n) for k, n in backend.jobs_read("job_live", {"id": job_id})}
        records = self.tasks(job_id) if tasks else ()
        return JobStatus.from_rows(JobRow._make(rows[0]), live, records)

    def tasks(self, job_id: str) -> tuple[TaskRecord, ...]:
        """The records of a job's finished tasks, in the order they ended."""
        rows = jobs_backend(self._db).jobs_read("job_tasks", {"id": job_id})
        return tuple(TaskRecord.from_row(TaskRow._make(r)) for r in rows)

    def list(self, *, open_only: bool = False, limit: int = 100) -> builtins.list[JobStatus]:
        """Jobs, newest first."""
        backend = jobs_backend(self._db)
        rows = backend.jobs_read("job_list", {"open": int(open_only), "limit": limit})
        found = []
        for row in map(JobRow._make, rows):
            live = {str(k): int(n) for k, n in backend.jobs_read("job_live", {"id": row.id})}
            found.append(JobStatus.from_rows(row, live))
        return found

    def set_info(self, job_id: str, info: Any) -> None:
        """Replace a job's free JSON info (kept between processing cycles)."""
        text = _json("info", info)
        if not jobs_backend(self._db).jobs_write(
            [Effect("job_info", {"id": job_id, "info": text}, expect=1)]
        ):
            raise JobNotFound(f"job {job_id!r} does not exist (or was cleaned up)")

    # --- schedules and load signals ----------------------------------------------------
    def schedule(
        self, name: str, task_type: str, cron: str, *, tz: str = "UTC", body: Body = None
    ) -> float:
        """Submit a ``task_type`` task at each due time of ``cron``, once across all workers.

        Returns the next due time (epoch seconds). Redefining a schedule with the
        same cron and zone keeps its next due time.
        """
        self.types.get(task_type)
        schedule = Cron.parse(cron, tz)
        due = schedule.next_after(self.clock.now())
        params = {
            "name": name,
            "task_type": task_type,
            "cron": cron,
            "tz": tz,
            "args": _json("body", body),
            "next_due": due,
        }
        jobs_backend(self._db).jobs_write([Effect("schedule_upsert", params)])
        return due

    def unschedule(self, name: str) -> bool:
        return jobs_backend(self._db).jobs_write(
            [Effect("schedule_delete", {"name": name}, expect=1)]
        )

    def schedules(self) -> builtins.list[dict[str, Any]]:
        rows = jobs_backend(self._db).jobs_read("schedule_list", {})
        return [
            {
                "name": s.name,
                "task_type": s.task_type,
                "cron": s.cron,
                "tz": s.tz,
                "body": json.loads(s.args),
                "next_due": s.next_due,
            }
            for s in map(ScheduleRow._make, rows)
        ]

    def report(self, metric: str, value: float) -> None:
        """Report a load signal (requests per minute, say) for load-following profiles."""
        params = {"name": metric, "value": float(value), "now": self.clock.now()}
        jobs_backend(self._db).jobs_write([Effect("metric_set", params)], durable=False)

    # --- completion alerts --------------------------------------------------------------
    def on_complete(self, callback: CompletionCallback) -> None:
        """Call ``callback(job)`` in this process when a job it sends the alert of has ended."""
        with self._lock:
            self._callbacks.append(callback)

    def send_alerts(self, job_id: str | None = None) -> int:
        """Announce ended jobs not yet announced (or just ``job_id``); how many this call sent.

        Each job's alert goes out once across all workers: the message to its
        alert queue commits together with the mark that it was sent.
        """
        backend = jobs_backend(self._db)
        if job_id is None:
            ids = [str(unalerted) for (unalerted,) in backend.jobs_read("jobs_unalerted", {})]
        else:
            rows = [JobRow._make(r) for r in backend.jobs_read("job_columns", {"id": job_id})]
            ids = [job_id for row in rows if row.ended_at is not None and row.alerted_at is None]
        sent = 0
        for job in ids:
            status = self.get(job, tasks=True)
            try:
                with self._db.transaction() as tx:
                    tx.add_effect(
                        Effect("job_alerted", {"id": job, "now": self.clock.now()}, expect=1)
                    )
                    if status.alert_queue is not None:
                        tx.enqueue(status.alert_queue, _alert(status))
            except Conflict:
                continue  # another worker announced it
            sent += 1
            with self._lock:
                callbacks = list(self._callbacks)
            for callback in callbacks:
                try:
                    callback(status)
                except Exception:
                    log.exception("sluice job %s: a completion callback failed", job)
        return sent

    # --- upkeep -----------------------------------------------------------------------
    def maintain(self) -> None:
        """Fire due schedules, announce ended jobs, and delete what retention lets go."""
        self.fire_schedules()
        self.send_alerts()
        now = self.clock.now()
        jobs_backend(self._db).jobs_write(
            [
                Effect("jobs_finish_stale", {"now": now}),
                Effect("tasks_expire", {"now": now}),
                Effect("jobs_expire_tasks", {"now": now}),
                Effect("jobs_expire", {"now": now}),
                Effect("windows_expire", {"before": now - _STALE_WINDOWS}),
            ],
            durable=False,
        )

    def fire_schedules(self) -> int:
        """Submit the tasks of due schedules; each due time fires once across all workers."""
        now = self.clock.now()
        fired = 0
        for name, task_type, cron, tz, args, first_due in jobs_backend(self._db).jobs_read(
            "schedules_due", {"now": now}
        ):
            schedule = Cron.parse(cron, tz)
            body = json.loads(args)
            due = first_due
            for _ in range(_CATCH_UP):
                if due > now:
                    break
                following = schedule.next_after(due)
                try:
                    with self._db.transaction() as tx:
                        tx.add_effect(
                            Effect(
                                "schedule_advance",
                                {"name": name, "due": due, "next": following},
                                expect=1,
                            )
                        )
                        enqueue_tasks(
                            tx, self.types, self.clock, JobHeader(None), [TaskSpec(task_type, body)]
                        )
                except Conflict:
                    break  # another worker fired this due time
                fired += 1
                due = following
        return fired

    def usage(self, task_type: str, since: float) -> builtins.list[tuple[str, float, int]]:
        """Starts counted per rate window since ``since``: (hour or cycle, start, used)."""
        rows = jobs_backend(self._db).jobs_read(
            "window_used", {"task_type": task_type, "since": since}
        )
        return [(str(w.kind), float(w.start), int(w.used)) for w in map(WindowRow._make, rows)]


def _alert(status: JobStatus) -> dict[str, Any]:
    return {
        "job": status.id,
        "name": status.name,
        "status": status.status,
        "total": status.total,
        "succeeded": [t.task for t in status.tasks if t.success],
        "failed": [{"task": t.task, "note": t.note} for t in status.tasks if not t.success],
        "ended_at": status.ended_at,
    }


def _json(what: str, value: Any) -> str:
    """JSON text of a schedule's body or a job's info; InvalidBody for what JSON cannot hold."""
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidBody(f"the {what} is not a JSON value ({exc}); nothing was stored") from exc
