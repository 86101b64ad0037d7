"""The worker runtime: threads that take tasks within their profiles and run their functions.

Each task runs inside a queue transaction: its completion record, the job's
roll-up and whatever the function enqueued commit together, or not at all. A
failed run goes back to its queue with a backoff delay; a task whose runs are
used up (by failures, timeouts or killed workers alike) is finished as failed
by the next worker that takes it, so a crash can never lose that outcome.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from sluice.backends.base import Effect
from sluice.engine.transaction import Transaction
from sluice.errors import Conflict, LeaseLost, SluiceError, TaskTimeout, UnknownTaskType
from sluice.jobs.catalog import PROCESSING_ORDER, jobs_backend
from sluice.jobs.limits import Gate
from sluice.jobs.model import TaskType
from sluice.jobs.task import Task, TaskFunction
from sluice.message import Message

if TYPE_CHECKING:
    from sluice.engine.database import Database
    from sluice.jobs.manager import Jobs

__all__ = ["DEFAULT_GRACE", "DEFAULT_POLL", "Worker", "WorkerShutdown"]

log = logging.getLogger("sluice.worker")

DEFAULT_POLL = 0.5
"""Real seconds an idle worker waits at most before looking for work again."""
DEFAULT_GRACE = 30.0
"""Real seconds a stopping worker lets running tasks finish before interrupting them."""
_INTERRUPT_WAIT = 2.0  # real seconds an interrupted task gets to roll back


class WorkerShutdown(BaseException):
    """Raised inside a task that was still running when its worker's grace period ended."""


class Worker:
    """Runs registered task functions in ``concurrency`` threads; see ``Database.worker``."""

    def __init__(
        self,
        db: Database,
        jobs: Jobs,
        functions: dict[str, TaskFunction],
        *,
        concurrency: int = 1,
        poll: float = DEFAULT_POLL,
        grace: float = DEFAULT_GRACE,
        signals: dict[str, Callable[[], float]] | None = None,
        maintenance_interval: float = 1.0,
    ) -> None:
        if not functions:
            raise UnknownTaskType("the worker has no task functions: register some with @db.task")
        if not isinstance(concurrency, int) or concurrency < 1:
            raise SluiceError(f"concurrency must be a positive int, not {concurrency!r}")
        self._db = db
        self._jobs = jobs
        self._functions = dict(functions)
        self.concurrency = concurrency
        self.poll = poll
        self.grace = grace
        self._gate = Gate(db, dict(signals or {}))
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._running: dict[int, _Run] = {}
        self._lock = threading.Lock()
        self._late_turn: dict[str, bool] = {}
        self._rotation = 0
        self._maintenance_interval = maintenance_interval
        self._maintained_at = 0.0
        self.processed = 0

    @property
    def gate(self) -> Gate:
        return self._gate

    # --- running -----------------------------------------------------------------------
    def run(self) -> None:
        """Work until ``stop()`` (or SIGTERM/SIGINT, when called in the main thread)."""
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            self.start()
            while not self._stopping.wait(self.poll):
                pass
            self.join()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("sluice worker: signal %s, finishing the tasks in hand", signum)
        self._stopping.set()

    def start(self) -> None:
        """Start the worker threads and return."""
        self._stopping.clear()
        for n in range(self.concurrency):
            thread = threading.Thread(target=self._loop, name=f"sluice-worker-{n}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Ask the threads to stop after their current task (see ``join``)."""
        self._stopping.set()

    def join(self) -> None:
        """Wait for the threads; tasks still running after ``grace`` seconds are interrupted.

        An interrupted task's transaction is rolled back, so its task returns to
        the queue to be run again. A task blocked in a C call (a sleep, a socket
        read) only sees the interruption when the call returns: such a thread is
        left behind after a few more seconds, and closing the Database gives its
        task back.
        """
        self._stopping.set()
        give_up = time.monotonic() + self.grace
        for thread in self._threads:
            thread.join(max(0.0, give_up - time.monotonic()))
        with self._lock:
            for run in self._running.values():
                run.interrupt(WorkerShutdown)
        give_up = time.monotonic() + _INTERRUPT_WAIT
        for thread in self._threads:
            thread.join(max(0.0, give_up - time.monotonic()))
            if thread.is_alive():
                log.warning("sluice worker: %s did not stop; left behind", thread.name)
        self._threads.clear()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                until = self.work_once()
            except SluiceError:
                log.exception("sluice worker: a task could not be taken or settled")
                until = self.poll
            if until > 0:
                self._wait(until)

    def _wait(self, clock_seconds: float) -> None:
        real = min(self._jobs.clock.real_seconds(clock_seconds), self.poll)
        queue = self._types()[0].queue
        wakeups = self._db._wakeups
        token = wakeups.token()
        if not self._stopping.is_set():
            wakeups.wait(token, real, queue)

    def run_until_idle(self, max_tasks: int | None = None) -> int:
        """Run tasks in this thread until none can start now; how many ran (tests, demos)."""
        ran = 0
        while max_tasks is None or ran < max_tasks:
            if self.work_once() != 0.0:
                break
            ran += 1
        self.maintain()
        return ran

    # --- one task ----------------------------------------------------------------------
    def work_once(self) -> float:
        """Take and run one task: 0.0 if one ran, else clock seconds worth waiting."""
        self._maintain_if_due()
        now = self._jobs.clock.now()
        waits = []
        for task_type in self._in_order(now):
            outcome = self._run_one(task_type, now)
            if outcome == 0.0:
                return 0.0
            waits.append(outcome)
        return min(waits) if waits else self.poll

    def _types(self) -> list[TaskType]:
        types = self._jobs.types
        return [types.get(name) for name in self._functions]

    def _in_order(self, now: float) -> list[TaskType]:
        """Task types by their profiles' priority now, equals taking turns."""
        types = self._types()
        with self._lock:
            self._rotation = (self._rotation + 1) % len(types)
            rotated = types[self._rotation :] + types[: self._rotation]

        def rank(task_type: TaskType) -> int:
            limits = self._gate.limits(task_type, now)
            return -(limits.priority or 0) if limits is not None else 0

        return sorted(rotated, key=rank)

    def _run_one(self, task_type: TaskType, now: float) -> float:
        starts, until = self._gate.take(task_type, now)
        if starts is None:
            return max(until - now, 0.001)
        tx = self._db.begin()
        try:
            message = self._next(tx, task_type, now)
        except BaseException:
            tx.abort()
            self._gate.give_back(starts)
            raise
        if message is None:
            tx.commit()
            self._gate.give_back(starts)
            return self.poll
        if message.attempts >= task_type.max_attempts:
            self._finish(tx, task_type, message, success=False, note=_used_up(message), started=now)
            self._gate.give_back(starts)
            return 0.0
        self._execute(tx, task_type, message)
        return 0.0

    def _next(self, tx: Transaction, task_type: TaskType, now: float) -> Message | None:
        """The next task by the processing order; late jobs take turns with the rest."""
        queue = task_type.queue
        late = jobs_backend(self._db).jobs_read(
            "late_jobs", {"now": now, "queue": queue, "limit": 1}
        )
        if not late:
            return _first(tx.dequeue(queue, order_by=PROCESSING_ORDER))
        job = str(late[0][0])
        on_time = f"props.job_deadline >= {now:.6f}"
        late_turn = self._late_turn.get(queue, False)
        self._late_turn[queue] = not late_turn
        order: Sequence[str | None] = (job, on_time) if late_turn else (on_time, job)
        for choice in order:
            if choice == job:
                where = f"props.job = '{job.replace(chr(39), chr(39) * 2)}'"
                found = _first(tx.dequeue(queue, where=where, order_by=PROCESSING_ORDER))
                if found is not None:
                    tx.add_effect(Effect("job_served", {"id": job}))
                    return found
            else:
                found = _first(tx.dequeue(queue, where=choice, order_by=PROCESSING_ORDER))
                if found is not None:
                    return found
        return _first(tx.dequeue(queue, order_by=PROCESSING_ORDER))

    def _execute(self, tx: Transaction, task_type: TaskType, message: Message) -> None:
        clock = self._jobs.clock
        started = clock.now()
        task = Task(message, task_type, tx, self._jobs.types, clock)
        function = self._functions[task_type.name]
        run = _Run(threading.get_ident())
        with self._lock:
            self._running[run.thread] = run
        timer = None
        if task_type.timeout is not None:
            timer = threading.Timer(task_type.timeout, run.interrupt, (TaskTimeout,))
            timer.daemon = True
            timer.start()
        error: BaseException | None = None
        try:
            try:
                function(task)
            finally:
                interrupted = run.finish()
                if timer is not None:
                    timer.cancel()
                with self._lock:
                    self._running.pop(run.thread, None)
            if interrupted is not None:
                raise interrupted("the task was interrupted when it had just finished")
        except (Exception, TaskTimeout, WorkerShutdown) as exc:
            error = exc
        if error is None:
            self._finish(
                tx, task_type, message, success=task.success, note=task.note, started=started
            )
        else:
            self._failed(tx, task_type, message, error, shutdown=isinstance(error, WorkerShutdown))

    def _finish(
        self,
        tx: Transaction,
        task_type: TaskType,
        message: Message,
        *,
        success: bool,
        note: str | None,
        started: float,
    ) -> None:
        """Settle the task as done (successfully or not) with its record and its job's roll-up."""
        now = self._jobs.clock.now()
        job = message.properties.get("job")
        if not success and note is not None:
            log.info("sluice task %s (%s) failed: %s", message.id, task_type.name, note)
        if job is not None or task_type.retention != 0:
            expires = None
            if job is None and task_type.retention is not None:
                expires = now + task_type.retention
            record = {
                "task": message.id,
                "job": job,
                "task_type": task_type.name,
                "success": int(success),
                "note": note,
                "attempts": message.attempts
                + (0 if message.attempts >= task_type.max_attempts else 1),
                "started": started,
                "now": now,
                "expires": expires,
            }
            tx.add_effect(Effect("task_record", record))
        if job is not None:
            counts = {
                "job": job,
                "ok": int(success),
                "bad": int(not success),
                "started": started,
                "now": now,
            }
            tx.add_effect(Effect("job_count", counts))
        if not success and message.attempts >= task_type.max_attempts:
            tx.reject(message, note or "failed")
        try:
            tx.commit()
        except (LeaseLost, Conflict):
            # Taken for dead while it ran: the task went back and runs again elsewhere.
            log.warning(
                "sluice task %s: lease lost before its commit; it will run again", message.id
            )
            return
        with self._lock:
            self.processed += 1
        if job is not None:
            self._jobs.send_alerts(str(job))

    def _failed(
        self,
        tx: Transaction,
        task_type: TaskType,
        message: Message,
        error: BaseException,
        *,
        shutdown: bool,
    ) -> None:
        """Roll the run back; the task returns after its backoff (its last run: at once)."""
        note = f"{type(error).__name__}: {error}"[:2000]
        attempts = message.attempts + 1
        delay = (
            0.0
            if shutdown or attempts >= task_type.max_attempts
            else task_type.retry_delay(attempts)
        )
        until = time.time() + self._jobs.clock.real_seconds(delay)
        params = {
            "until": until,
            "note": note,
            "ref": message.ref,
            "session": tx.session,
            "tx": tx.number,
        }
        try:
            jobs_backend(self._db).jobs_write([Effect("task_hold_back", params)], durable=False)
        finally:
            tx.abort()
        if not shutdown:
            log.info(
                "sluice task %s (%s) attempt %s failed: %s",
                message.id,
                task_type.name,
                attempts,
                note,
            )

    # --- upkeep ------------------------------------------------------------------------
    def _maintain_if_due(self) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._maintained_at < self._maintenance_interval:
                return
            self._maintained_at = now
        self.maintain()

    def maintain(self) -> None:
        """Fire due schedules, send completion alerts and clean up by retention."""
        self._jobs.maintain()


class _Run:
    """A task running in one thread, which a timeout or shutdown may interrupt."""

    def __init__(self, thread: int) -> None:
        self.thread = thread
        self._lock = threading.Lock()
        self._active = True
        self._sent: type[BaseException] | None = None

    def interrupt(self, error: type[BaseException]) -> None:
        with self._lock:
            if not self._active or self._sent is not None:
                return
            self._sent = error
            # Raised in the task's thread at its next Python instruction (a C call that
            # blocks is interrupted when it returns).
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self.thread), ctypes.py_object(error)
            )

    def finish(self) -> type[BaseException] | None:
        """The task's function has returned or raised: no interruption from now on.

        An interruption sent but not yet raised is withdrawn and returned.
        """
        with self._lock:
            self._active = False
            if self._sent is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread), None)
            return self._sent


def _first(messages: list[Message]) -> Message | None:
    return messages[0] if messages else None


def _used_up(message: Message) -> str:
    return message.error or f"no attempts left after {message.attempts} runs"
