"""``SluiceBackend``: Django's task API (``@task``, ``enqueue``, ``get_result``) on sluice.

A Django queue is a sluice task type (``prefix + queue_name``, in the sluice queue
``tasks.<type>``), an enqueue is a job of one task, and ``manage.py sluice_worker`` runs
them with sluice's worker runtime. Enqueues follow the application's transaction:
on PostgreSQL, when sluice lives in Django's own database, they are written through
Django's connection inside its transaction (``join``: they commit or roll back with it,
and a crash cannot separate them); otherwise they are committed by
``transaction.on_commit`` (``on_commit``: a rollback drops them, but a crash between the
application's commit and sluice's loses them). docs/django.md says which is which.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from typing_extensions import ParamSpec

import sluice
from sluice.contrib.django.api import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from sluice.contrib.django.databases import database
from sluice.contrib.django.options import Options, database_url, read_options
from sluice.contrib.django.records import INFO_KEY, call_of, moment, result_of
from sluice.contrib.django.runner import Runner, Worker, worker_id

__all__ = ["SluiceBackend"]

P = ParamSpec("P")
T = TypeVar("T")


class SluiceBackend(BaseTaskBackend):
    """Django tasks in sluice: durable, transactional, run by ``manage.py sluice_worker``."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.settings: Options = read_options(alias, params.get("OPTIONS", {}))
        self._defined: set[str] = set()

    # --- where the tasks live -----------------------------------------------------------
    @functools.cached_property
    def url(self) -> str:
        """The sluice database: OPTIONS['url'], or derived from the Django database."""
        return database_url(self.settings, self._connection().settings_dict)

    @property
    def db(self) -> sluice.Database:
        """The sluice Database of this backend (shared by the process's backends)."""
        return database(self.url)

    def task_type(self, queue_name: str) -> str:
        """The sluice task type of a Django queue (whose sluice queue is ``tasks.<type>``)."""
        return self.settings.task_type(queue_name)

    def _connection(self) -> Any:
        name = self.settings.database
        if name not in connections.settings:
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}]: there is no DATABASES[{name!r}] for enqueues to follow; "
                "set OPTIONS['database'] to one of "
                f"{', '.join(map(repr, connections.settings)) or '(none configured)'}"
            )
        return connections[name]

    def _define(self, queue_name: str) -> str:
        """The queue's task type, defined in the database once per process."""
        name = self.task_type(queue_name)
        if name not in self._defined:
            try:
                self.db.jobs.define(
                    name,
                    max_attempts=self.settings.max_attempts,
                    timeout=self.settings.timeout,
                    duration=self.settings.deadline,
                )
            except sluice.ConfigurationError as exc:
                raise ImproperlyConfigured(
                    f"TASKS[{self.alias!r}]: queue {queue_name!r} cannot be a sluice task type "
                    f"{name!r} ({exc}); rename the queue or change OPTIONS['prefix']"
                ) from exc
            self._defined.add(name)
        return name

    @functools.cached_property
    def joins(self) -> bool:
        """Whether enqueues run in the Django connection's own transaction (PostgreSQL)."""
        mode = self.settings.transaction
        if mode == "on_commit":
            return False
        same, why = self._same_postgres_database()
        if mode == "join" and not same:
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}]: OPTIONS['transaction'] = 'join' needs sluice in the "
                f"PostgreSQL database of DATABASES[{self.settings.database!r}] ({why}); leave "
                "OPTIONS['url'] out to use that database, or set 'transaction': 'on_commit'"
            )
        return same

    def _same_postgres_database(self) -> tuple[bool, str]:
        conn = self._connection()
        if conn.vendor != "postgresql":
            return False, f"that database is {conn.vendor}"
        # Imported only for a PostgreSQL database: it imports psycopg.
        psycopg_any = importlib.import_module("django.db.backends.postgresql.psycopg_any")
        if not psycopg_any.is_psycopg3:
            return False, "Django uses psycopg2 there; sluice joins psycopg 3 connections"
        parts = urlsplit(self.url)
        if not parts.scheme.startswith("postgres"):
            return False, f"sluice's URL is {parts.scheme}"
        ours = (parts.hostname or "", parts.port or 5432, unquote(parts.path.lstrip("/")))
        given = conn.settings_dict
        theirs = (given.get("HOST") or "", int(given.get("PORT") or 5432), given.get("NAME"))
        if self.settings.url is not None and ours != theirs:
            return False, f"sluice's URL names {ours}, DATABASES names {theirs}"
        return True, ""

    # --- enqueue --------------------------------------------------------------------------
    def enqueue(
        self,
        task: Task[P, T],
        args: P.args,  # type: ignore[valid-type]
        kwargs: P.kwargs,  # type: ignore[valid-type]
    ) -> TaskResult[T]:
        """Submit the task as a sluice job; its id is the result's id."""
        self.validate_task(task)
        db = self.db
        task_type = self._define(task.queue_name)
        now = db.clock.now()
        result: TaskResult[T] = TaskResult(
            task=task,
            id="",  # set below: the job's id, known once it is submitted
            status=TaskResultStatus.READY,
            enqueued_at=moment(now),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),  # normalised to JSON (a TypeError for what is not) by TaskResult
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        call = call_of(task, result.args, result.kwargs, self.alias, now)
        if self.joins:
            alias = self.settings.database
            # atomic(savepoint=False): a transaction of its own in autocommit mode, and
            # inside the caller's one a failure marks it for rollback as Django expects.
            with transaction.atomic(using=alias, savepoint=False):
                raw = self._connection().connection
                with db.transaction(connection=raw) as tx:
                    object.__setattr__(result, "id", self._submit(db, tx, task_type, call))
            task_enqueued.send(type(self), task_result=result)
        else:
            tx = db.begin()
            try:
                object.__setattr__(result, "id", self._submit(db, tx, task_type, call))
            except BaseException:
                tx.abort()
                raise
            # Buffered until then: a transaction that never commits (Django rolled back)
            # wrote nothing and holds nothing.
            transaction.on_commit(
                functools.partial(self._commit, tx, result), using=self.settings.database
            )
        return result

    def _submit(
        self, db: sluice.Database, tx: sluice.Transaction, task_type: str, call: dict[str, Any]
    ) -> str:
        priority = int(call["priority"])  # Django's -100..100 is sluice's: higher first
        spec = sluice.TaskSpec(task_type, call, priority=priority, start_at=call["run_after"])
        try:
            return db.jobs.submit(
                call["task"],
                [spec],
                priority=priority,
                info={INFO_KEY: call},
                retention=self.settings.retention,
                tx=tx,
            )
        except sluice.InvalidBody as exc:
            raise InvalidTask(f"the task's arguments cannot be stored as JSON: {exc}") from exc

    def _commit(self, tx: sluice.Transaction, result: TaskResult[Any]) -> None:
        tx.commit()
        task_enqueued.send(type(self), task_result=result)

    # --- results --------------------------------------------------------------------------
    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The result of ``result_id`` (a job id), from the finished task's record."""
        try:
            job = self.db.jobs.get(result_id, tasks=True)
        except sluice.JobNotFound as exc:
            raise TaskResultDoesNotExist(str(exc)) from exc
        return result_of(job)

    # --- checks (manage.py check) ------------------------------------------------------------
    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        """What would fail later: no sluice database to be had, no worker command."""
        yield from super().check(**kwargs)
        try:
            _ = self.url
        except ImproperlyConfigured as exc:
            yield checks.Error(str(exc), obj=f"TASKS[{self.alias!r}]", id="sluice.E001")
        if not apps.is_installed("sluice.contrib.django"):
            yield checks.Warning(
                "manage.py sluice_worker, which runs this backend's tasks, is not available",
                hint="add 'sluice.contrib.django' to INSTALLED_APPS",
                obj=f"TASKS[{self.alias!r}]",
                id="sluice.W001",
            )

    # --- the worker -----------------------------------------------------------------------
    def worker(
        self,
        queue_names: Sequence[str] | None = None,
        *,
        concurrency: int = 1,
        batch: int | None = None,
        grace: float | None = None,
    ) -> Worker:
        """A sluice worker for ``queue_names`` (all of QUEUES by default) in this process."""
        names = list(queue_names or sorted(self.queues))
        if not names:
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}] lists no QUEUES: name the queues the worker runs"
            )
        unknown = [n for n in names if self.queues and n not in self.queues]
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}] has no queue {', '.join(map(repr, unknown))}; its "
                f"QUEUES are {', '.join(map(repr, sorted(self.queues)))}"
            )
        db = self.db
        runner = Runner(type(self), worker_id())
        for name in names:
            task_type = self._define(name)
            db.task(
                task_type,
                max_attempts=self.settings.max_attempts,
                timeout=self.settings.timeout,
                duration=self.settings.deadline,
            )(runner)
        types = [self.task_type(n) for n in names]
        return db.worker(tasks=types, concurrency=concurrency, batch=batch, grace=grace)
