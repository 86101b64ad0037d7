"""The Database: one session on a backend, its catalog of queues and its transactions."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sluice.backends.base import SLOTS, Backend, Selection
from sluice.catalog import (
    DEFAULT_MAX_SIZE,
    Durability,
    Isolation,
    QueueSpec,
    check_name,
    check_queue_name,
)
from sluice.clock import Clock
from sluice.engine import lease as leases
from sluice.engine.content import QueueContent, free_slot
from sluice.engine.queue import Queue
from sluice.engine.transaction import Transaction
from sluice.engine.types import TypeRegistry, definition_of
from sluice.engine.wakeups import Wakeups
from sluice.errors import ConfigurationError, QueueExists, QueueNotFound, SluiceError

if TYPE_CHECKING:
    from sluice.jobs.manager import Jobs
    from sluice.jobs.task import TaskFunction
    from sluice.jobs.worker import Worker

__all__ = ["DEFAULT_LEASE", "DEFAULT_POLL_INTERVAL", "Database"]

log = logging.getLogger("sluice")

DEFAULT_LEASE = 30.0
"""Seconds a session may go without heartbeat before others roll it back."""
DEFAULT_POLL_INTERVAL = 0.05
"""Seconds between change checks while waiting for work written by other processes."""
_SPEC_TTL = 1.0  # queue settings altered by another process are seen within this time

_UNSET: Any = object()

# SQLite connections must not be used across fork() (the SQLite docs warn of
# corruption), so every Database learns when it finds itself in a forked child.
_open_databases: weakref.WeakSet[Database] = weakref.WeakSet()


def _forget_in_child() -> None:
    for db in list(_open_databases):
        db._forked = True


os.register_at_fork(after_in_child=_forget_in_child)


class Database:
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
        if lease <= 0 or poll_interval <= 0:
            raise ConfigurationError("lease and poll_interval must be positive numbers of seconds")
        self.backend = backend
        if clock is not None:
            backend.clock = clock
        self.lease = lease
        self.max_message_size = max_message_size
        self._wakeups = Wakeups(backend, poll_interval)
        self._specs: dict[str, tuple[QueueSpec, float]] = {}
        self._contents: dict[str, QueueContent] = {}
        self._types = TypeRegistry(backend.message_types)
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._session = backend.open_session(leases.host_key(), os.getpid(), lease)
        self._closed = False
        self._forked = False
        self._jobs: Jobs | None = None
        self._task_functions: dict[str, TaskFunction] = {}
        _open_databases.add(self)
        self.recover()
        self._keeper = leases.LeaseKeeper(self._tick, lease)
        self._keeper.start()

    @property
    def clock(self) -> Clock:
        """The time messages and jobs are judged by (``sluice.clock``); settable, for tests.

        By default the wall clock (on PostgreSQL the server's). Leases stay on real time.
        """
        return self.backend.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.backend.clock = clock

    @property
    def session(self) -> int:
        """This connection's session id (the S of message ids)."""
        return self._session

    def _next_transaction(self) -> tuple[int, int]:
        # No lock: it runs for every put and get, and next() on a count and reading
        # two attributes are atomic under the GIL; close() only ever sets _closed.
        if self._closed or self._forked:
            raise self._unusable()
        return self._session, next(self._numbers)

    def _unusable(self) -> SluiceError:
        if self._forked:
            return SluiceError(
                "this Database was opened before a fork; call sluice.connect in the child process"
            )
        return SluiceError("the database connection is closed; call sluice.connect again")

    # --- transactions ----------------------------------------------------------------
    def begin(self, *, connection: object | None = None) -> Transaction:
        """Start a queue transaction; end it with commit() or abort().

        ``connection`` (PostgreSQL only): a psycopg connection whose current
        transaction the queue transaction joins, so that its enqueues and
        dequeues commit, or roll back, with the caller's own statements.
        """
        if connection is None:
            return Transaction(self)
        bind = getattr(self.backend, "bind", None)
        if bind is None:
            raise ConfigurationError(
                "transaction(connection=...) needs the PostgreSQL backend, "
                f"not {self.backend.dialect}"
            )
        return Transaction(self, backend=bind(connection))

    def transaction(self, *, connection: object | None = None) -> Transaction:
        """A transaction for ``with``: commits on exit, aborts on an exception.

        With ``connection`` the commit is the caller's (see ``begin``).
        """
        return self.begin(connection=connection)

    # --- catalog ---------------------------------------------------------------------
    def create_queue(
        self,
        name: str,
        *,
        max_attempts: int | None = None,
        error_queue: str | None = None,
        durability: Durability = "persistent",
        max_size: int | None = None,
        types: Sequence[str] = (),
        priority: Mapping[str, str] | None = None,
        isolation: Isolation = "none",
        exist_ok: bool = False,
    ) -> Queue:
        """Create a queue (and its error queue, if that does not exist yet).

        ``types``: the message types it accepts (default: any message);
        ``priority``: per message type (``"*"``: any other), an expression that
        gives a message enqueued without a priority its priority;
        ``isolation``: ``none``, ``ordered``, ``blockwise`` or
        ``ordered_blockwise``, how concurrent readers are kept apart
        (docs/isolation.md).
        """
        spec = QueueSpec(
            name,
            max_attempts=max_attempts,
            error_queue=error_queue,
            durability=durability,
            max_size=self.max_message_size if max_size is None else max_size,
            types=_names(types),
            priority=tuple((priority or {}).items()),
            isolation=isolation,
        )
        self._check_types(spec)
        if error_queue is not None and self.backend.get_queue(error_queue) is None:
            self.create_queue(error_queue, durability=durability, exist_ok=True)
        try:
            self.backend.create_queue(spec)
        except QueueExists:
            if not exist_ok:
                raise
        return Queue(self, name)

    def queue(self, name: str) -> Queue:
        """A handle on an existing queue; QueueNotFound if there is none."""
        self._spec(name)
        return Queue(self, name)

    def queues(self) -> list[QueueSpec]:
        """The settings of every queue, by name."""
        return self.backend.list_queues()

    def alter_queue(
        self,
        name: str,
        *,
        max_attempts: int | None = _UNSET,
        error_queue: str | None = _UNSET,
        durability: Durability = _UNSET,
        max_size: int = _UNSET,
        types: Sequence[str] = _UNSET,
        priority: Mapping[str, str] = _UNSET,
        isolation: Isolation = _UNSET,
    ) -> QueueSpec:
        """Change a queue's settings; arguments left out keep their value.

        The isolation level changes only while the queue holds no live
        messages (QueueInUse otherwise); other processes see the change within
        a second, as with every setting.
        """
        current = self._spec(name, fresh=True)
        changes: dict[str, Any] = {
            key: value
            for key, value in (
                ("max_attempts", max_attempts),
                ("error_queue", error_queue),
                ("durability", durability),
                ("max_size", max_size),
                ("types", _UNSET if types is _UNSET else _names(types)),
                ("priority", _UNSET if priority is _UNSET else tuple(priority.items())),
                ("isolation", isolation),
            )
            if value is not _UNSET
        }
        spec = replace(current, **changes)
        self._check_types(spec)
        if spec.error_queue is not None and self.backend.get_queue(spec.error_queue) is None:
            self.create_queue(spec.error_queue, durability=spec.durability, exist_ok=True)
        self.backend.alter_queue(spec)
        self._specs.pop(name, None)
        self._contents.pop(name, None)
        return spec

    # --- content: message types and declared properties ------------------------------
    def create_type(
        self,
        name: str | None = None,
        *,
        schema: dict[str, Any] | None = None,
        model: type | None = None,
        jpmq: str | None = None,
        xml_schema: str | None = None,
    ) -> str:
        """Define a message type; returns its name.

        Exactly one of: ``schema`` (a JSON Schema dict), ``model`` (a Pydantic
        model class, which is also bound: bodies of this type come back as its
        instances), ``jpmq`` (JPMQ's type definition language; its
        MESSAGETYPE names the type) or ``xml_schema`` (XML Schema text, for XML
        bodies). ``name`` may be left out when the definition names itself.
        """
        own_name, kind, definition = definition_of(
            schema=schema, model=model, jpmq=jpmq, xml_schema=xml_schema
        )
        type_name = check_name(name or own_name or "", "message type")
        self.backend.create_type(type_name, kind, definition)
        if model is not None:
            self._types.bind(type_name, model)
        return type_name

    def bind_model(self, model: type, name: str | None = None) -> None:
        """Have bodies of type ``name`` (default: the class's name) come back as ``model``.

        Binding is per process: a consumer binds the classes it wants to receive.
        """
        type_name = name or model.__name__
        if self._types.get(type_name) is None:
            raise ConfigurationError(f"message type {type_name!r} is not defined")
        self._types.bind(type_name, model)

    def message_types(self) -> dict[str, Any]:
        """Every message type's definition: a JSON Schema dict, or XML Schema text."""
        return {name: self._types.get(name).schema for name in self.backend.message_types()}  # type: ignore[union-attr]

    def create_property(
        self,
        name: str,
        expression: str,
        *,
        queues: Sequence[str],
        type: str | None = None,
        indexed: bool = True,
    ) -> None:
        """Declare a property: computed at enqueue, stored and indexed on ``queues``.

        Selections may then name it (``customer = 'Smith'``); a selection that
        spells out its expression uses the stored value as well. ``type`` is
        text, number or boolean; a bare JSON path is text unless told otherwise.
        Messages already in the queues get their value now. ``indexed=False``
        stores it without an index of its own (for values only ordered by an index
        that covers them, as task queues' are).
        """
        from sluice.expr import parse  # noqa: PLC0415  (sqlglot loads when content is used)

        check_name(name, "property")
        if isinstance(queues, str) or not queues:
            raise ConfigurationError("queues= takes a list of queue names")
        node = parse(expression)
        kind = type or (node.type if node.type in ("text", "number", "boolean") else "text")
        if kind not in ("text", "number", "boolean"):
            raise ConfigurationError(f"type must be text, number or boolean, not {kind!r}")
        node = parse(expression, want=kind)  # type: ignore[arg-type]
        fills = {}
        for queue in queues:
            self._spec(queue, fresh=True)
            taken = [p.slot for p in self.backend.queue_properties(queue)]
            slot = free_slot(kind, taken, queue)  # type: ignore[arg-type]
            assert slot in SLOTS
            fills[queue] = (slot, *self._compile_value(node))
            self._contents.pop(queue, None)
        self.backend.create_property(name, expression, kind, fills, indexed=indexed)

    def _compile_value(self, node: Any) -> tuple[str, dict[str, Any]]:
        compiler = getattr(self.backend, "expression_compiler", None)
        if compiler is None:
            raise ConfigurationError(
                f"the {self.backend.dialect} backend cannot compile properties"
            )
        sql = compiler()
        text = sql.compile(node)
        if node.type == "boolean":  # stored as a number: 1 or 0
            text = f"(CASE WHEN {text} THEN 1 WHEN NOT {text} THEN 0 END)"
        return text, sql.params

    def _check_types(self, spec: QueueSpec) -> None:
        missing = [t for t in spec.types if self._types.get(t) is None]
        missing += [t for t, _ in spec.priority if t != "*" and self._types.get(t) is None]
        if missing:
            raise ConfigurationError(
                f"message type {', '.join(map(repr, sorted(set(missing))))} is not defined; "
                "define it with db.create_type first"
            )

    def selection(
        self, queue: str, where: str | None, order_by: Sequence[str] | None = None
    ) -> Selection | None:
        """The checked selection of ``where``/``order_by`` on ``queue`` (None: everything).

        ExpressionError if the text does not parse or reaches outside the message.
        """
        return self._content(queue).selection(where, order_by)

    def _content(self, name: str) -> QueueContent:
        spec = self._spec(name)
        content = self._contents.get(name)
        if content is None or content.spec is not spec:
            content = QueueContent.build(spec, self.backend.queue_properties(name))
            self._contents[name] = content
        return content

    def drop_queue(self, name: str) -> None:
        """Remove a queue and every message in it.

        Refused (QueueInUse) while it is another queue's error queue or open
        transactions hold or enqueue its messages; dead sessions are rolled back first.
        """
        check_queue_name(name)
        self.recover()
        self.backend.drop_queue(name)
        self._specs.pop(name, None)
        self._contents.pop(name, None)

    def _spec(self, name: str, *, fresh: bool = False) -> QueueSpec:
        if self._forked:
            raise self._unusable()
        cached = self._specs.get(name)
        now = time.monotonic()
        if cached is not None and not fresh and cached[1] > now:
            return cached[0]
        spec = self.backend.get_queue(check_queue_name(name))
        if spec is None:
            self._specs.pop(name, None)
            raise QueueNotFound(
                f"queue {name!r} does not exist; create it with db.create_queue({name!r})"
            )
        self._specs[name] = (spec, now + _SPEC_TTL)
        return spec

    # --- jobs and tasks (docs/jobs.md) -------------------------------------------------
    @property
    def jobs(self) -> Jobs:
        """Task types, profiles, jobs, schedules and alerts of this database."""
        with self._lock:
            if self._jobs is None:
                from sluice.jobs.manager import Jobs  # noqa: PLC0415  (jobs builds on this module)

                self._jobs = Jobs(self)
            return self._jobs

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
        from sluice.jobs import model  # noqa: PLC0415

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
        batch: int = 1,
        poll: float | None = None,
        grace: float | None = None,
        signals: Mapping[str, Callable[[], float]] | None = None,
    ) -> Worker:
        """A worker for the task functions registered with ``@db.task`` (or those of ``tasks``).

        ``worker.run()`` works until stopped (SIGTERM/SIGINT in the main thread
        finish the tasks in hand first); ``start()``/``stop()``/``join()`` run
        it in the background; ``run_until_idle()`` in the calling thread.
        ``batch``: tasks a thread takes and settles in one transaction (one
        fsync for all; a task that fails is given back alone); ``signals``: load
        signals by name, for load-following profiles.
        """
        from sluice.jobs.worker import DEFAULT_GRACE, DEFAULT_POLL, Worker  # noqa: PLC0415

        names = list(self._task_functions) if tasks is None else list(tasks)
        missing = [n for n in names if n not in self._task_functions]
        if missing:
            from sluice.errors import UnknownTaskType  # noqa: PLC0415

            raise UnknownTaskType(
                f"no function registered for task type {', '.join(map(repr, missing))}: "
                "decorate one with @db.task(name) in this process"
            )
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

    # --- sessions --------------------------------------------------------------------
    def recover(self) -> list[int]:
        """Roll back sessions whose owners died; returns their ids. Runs by itself too."""
        dead = self.backend.recover(lambda s: leases.is_dead(s, me=self._session))
        if dead:
            log.info("sluice rolled back dead sessions %s", dead)
            self._wakeups.notify()
        return dead

    def _tick(self) -> None:
        if not self.backend.heartbeat(self._session):
            # We were taken for dead (stalled past the lease): our open
            # transactions were rolled back and will fail at commit. Carry on
            # under a new session for new work.
            with self._lock:
                self._session = self.backend.open_session(
                    leases.host_key(), os.getpid(), self.lease
                )
            log.warning("sluice session lease was lost; continuing as session %s", self._session)
        self.recover()

    def close(self) -> None:
        """End the session: whatever it still holds is rolled back. Idempotent."""
        if self._forked:  # the parent's connection and session: not the child's to end
            self._closed = True
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._keeper.stop()
        try:
            self.backend.close_session(self._session)
        finally:
            self.backend.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _names(types: Sequence[str]) -> tuple[str, ...]:
    if isinstance(types, str):
        raise ConfigurationError("types= takes a list of message type names")
    return tuple(types)
