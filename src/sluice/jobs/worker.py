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
import math
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from sluice.backends.base import Effect
from sluice.engine.observe import Destination
from sluice.engine.transaction import Transaction
from sluice.engine.wakeups import Token, Wakeups
from sluice.errors import Conflict, LeaseLost, SluiceError, TaskTimeout, UnknownTaskType
from sluice.jobs.catalog import is_task, jobs_backend, processing_order, property_name
from sluice.jobs.limits import Gate
from sluice.jobs.model import TaskType
from sluice.jobs.stats import WorkerStats
from sluice.jobs.task import Task, TaskFunction
from sluice.message import Message

if TYPE_CHECKING:
    from sluice.engine.database import Engine
    from sluice.jobs.manager import Jobs

__all__ = [
    "ADAPTIVE_BUDGET",
    "ADAPTIVE_MAX",
    "DEFAULT_GRACE",
    "DEFAULT_POLL",
    "Worker",
    "WorkerShutdown",
]

log = logging.getLogger("sluice.worker")

DEFAULT_POLL = 0.5
"""Real seconds an idle worker waits at most before looking for work again."""
DEFAULT_GRACE = 30.0
"""Real seconds a stopping worker lets running tasks finish before interrupting them."""
_INTERRUPT_WAIT = 2.0  # real seconds an interrupted task gets to roll back
_LATE_CHECK = 0.5  # real seconds a worker believes that no job is late, at one clock time
ADAPTIVE_MAX = 64
"""Most tasks an adaptive worker thread (no ``batch=`` given) settles in one commit."""
ADAPTIVE_BUDGET = 0.02
"""Real seconds of task runs an adaptive batch aims at: what a task's commit may wait for
other tasks of its batch, and about the most a crash makes run again."""


class WorkerShutdown(BaseException):
    """Raised inside a task that was still running when its worker's grace period ended."""


class Worker:
    """Runs registered task functions in ``concurrency`` threads; see ``Database.worker``."""

    def __init__(
        self,
        db: Engine,
        jobs: Jobs,
        functions: dict[str, TaskFunction],
        *,
        concurrency: int = 1,
        batch: int | None = None,
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
        if batch is not None and (not isinstance(batch, int) or batch < 1):
            raise SluiceError(f"batch must be a positive int or None (adaptive), not {batch!r}")
        self.batch = batch
        # Adaptive batch sizes, per thread and task type (each thread has its own commits).
        self._sizes = threading.local()
        self.poll = poll
        self.grace = grace
        self._gate = Gate(db, dict(signals or {}))
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._running: dict[int, _Run] = {}
        self._lock = threading.Lock()
        self._late_turn: dict[str, bool] = {}
        self._no_late: dict[str, tuple[float, float]] = {}
        self._rotation = 0
        self._maintenance_interval = maintenance_interval
        self._maintained_at = 0.0
        self.stats = WorkerStats()
        """Tasks settled, failed and failed runs so far (progress: read from a timer)."""

    @property
    def processed(self) -> int:
        """Tasks settled so far (``stats.processed``)."""
        return self.stats.processed

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
        self._db.context.wakeups.notify()  # threads waiting for work notice at once

    def join(self) -> None:
        """Wait for the threads; tasks still running after ``grace`` seconds are interrupted.

        An interrupted task's transaction is rolled back, so its task returns to
        the queue to be run again. A task blocked in a C call (a sleep, a socket
        read) only sees the interruption when the call returns: such a thread is
        left behind after a few more seconds, and closing the Database gives its
        task back.
        """
        self.stop()
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
        wakeups = self._db.context.wakeups
        # A wait needs a token taken before the look that found nothing, so a task
        # committed meanwhile ends it. A busy thread takes none (on SQLite a token is a
        # read of the file's change counter): it takes one once a look comes up empty,
        # and looks once more before it waits.
        token: Token | None = None
        while not self._stopping.is_set():
            failed = False
            try:
                until = self.work_once()
            except SluiceError:
                log.exception("sluice worker: a task could not be taken or settled")
                until, failed = self.poll, True
            if until <= 0 or self._stopping.is_set():
                token = None
            elif token is None and not failed:
                token = wakeups.token()
            else:  # after a failure, no second look first: it waits (for news, or the poll)
                real = min(self._jobs.clock.real_seconds(until), self.poll)
                # Any of its task types' queues: a task of any type wakes the worker.
                wakeups.wait(token or wakeups.token(), real, [t.queue for t in self._types()])
                token = wakeups.token()

    def run_until_idle(self, max_tasks: int | None = None) -> int:
        """Run tasks in this thread until none can start now; how many ran (tests, demos)."""
        ran = 0
        while max_tasks is None or ran < max_tasks:
            taken, _ = self._work(None if max_tasks is None else max_tasks - ran)
            if not taken:
                break
            ran += taken
        self.maintain()
        return ran

    # --- one batch ---------------------------------------------------------------------
    def work_once(self) -> float:
        """Take and run one batch of tasks: 0.0 if any ran, else clock seconds worth waiting."""
        return self._work(None)[1]

    def _work(self, most: int | None) -> tuple[int, float]:
        """One batch of at most ``most`` tasks: (tasks settled, 0.0) or (0, seconds to wait)."""
        self._maintain_if_due()
        now = self._jobs.clock.now()
        waits = []
        for task_type in self._in_order(now):
            taken, wait = self._run_one(task_type, now, most)
            if taken:
                return taken, 0.0
            waits.append(wait)
        return 0, min(waits) if waits else self.poll

    def _thread_sizes(self) -> dict[str, int]:
        """This thread's adaptive sizes by task type."""
        sizes: dict[str, int] = self._sizes.__dict__.setdefault("sizes", {})
        return sizes

    def _size(self, task_type: TaskType) -> int:
        """Tasks to take next: ``batch``, or the adaptive size this thread has learnt."""
        if self.batch is not None:
            return self.batch
        return self._thread_sizes().get(task_type.name, 1)

    def _learn(self, task_type: TaskType, asked: int, taken: int, seconds: float) -> None:
        """Adapt this thread's next size for ``task_type`` to what the last batch took."""
        if self.batch is None:
            self._thread_sizes()[task_type.name] = adapted_size(asked, taken, seconds)

    @property
    def context_wakeups(self) -> Wakeups:
        """The wake-ups an idle worker waits on (sluice.aio's worker waits on the loop)."""
        return self._db.context.wakeups

    @property
    def queues(self) -> list[str]:
        """The queues of its task types: a task in any of them is work for it."""
        return [t.queue for t in self._types()]

    def real_seconds(self, seconds: float) -> float:
        """``seconds`` of the jobs clock in real seconds."""
        return self._jobs.clock.real_seconds(seconds)

    def _types(self) -> list[TaskType]:
        types = self._jobs.types
        return [types.get(name) for name in self._functions]

    def _in_order(self, now: float) -> list[TaskType]:
        """Task types by their profiles' priority now, equals taking turns."""
        types = self._types()
        if len(types) == 1:
            return types  # nothing to rank: no profile to evaluate for it on every task
        with self._lock:
            self._rotation = (self._rotation + 1) % len(types)
            rotated = types[self._rotation :] + types[: self._rotation]

        def rank(task_type: TaskType) -> int:
            limits = self._gate.limits(task_type, now)
            return -(limits.priority or 0) if limits is not None else 0

        return sorted(rotated, key=rank)

    def _run_one(self, task_type: TaskType, now: float, most: int | None) -> tuple[int, float]:
        size = self._size(task_type)
        if most is not None:
            size = max(1, min(size, most))
        starts, until = self._gate.take(task_type, now, size)
        if starts is None:
            if size > 1:  # the window may still have room for fewer
                starts, until = self._gate.take(task_type, now, 1)
            if starts is None:
                return 0, max(until - now, 0.001)
        tx = self._db.begin()
        try:
            messages = self._next(tx, task_type, now, starts.n)
        except BaseException:
            tx.abort()
            self._gate.give_back(starts)
            raise
        if not messages:
            tx.commit()
            self._gate.give_back(starts)
            return 0, self.poll
        began = time.perf_counter()
        ran = self._execute(tx, task_type, messages)
        self._learn(task_type, starts.n, len(messages), time.perf_counter() - began)
        self._gate.give_back(starts, starts.n - ran)
        return len(messages), 0.0

    def _next(self, tx: Transaction, task_type: TaskType, now: float, limit: int) -> list[Message]:
        """The next tasks by the processing order; late jobs take turns with the rest.

        While a job is late, one task at a time, so that the turns stay fair.
        """
        queue = task_type.queue
        order = processing_order(queue)
        tasks = is_task(queue)
        late = self._late_jobs(queue, now)
        if not late:
            return tx.dequeue(queue, where=tasks, order_by=order, limit=limit)
        job = late[0]
        quoted = job.replace("'", "''")
        late_job = f"{tasks} AND {property_name('job', queue)} = '{quoted}'"
        # Whole seconds: the selection's text, compiled once and cached, changes once a second.
        on_time = f"{tasks} AND {property_name('job_urgency', queue)} <= {-math.floor(now)}"
        late_turn = self._late_turn.get(queue, False)
        self._late_turn[queue] = not late_turn
        for where in (late_job, on_time) if late_turn else (on_time, late_job):
            found = tx.dequeue(queue, where=where, order_by=order)
            if found:
                if where is late_job:
                    tx.add_effect(Effect("job_served", {"id": job}))
                return found
        return tx.dequeue(queue, where=tasks, order_by=order)

    def _late_jobs(self, queue: str, now: float) -> list[str]:
        """Late jobs with tasks ready in ``queue``; "none" is believed for a moment."""
        checked = self._no_late.get(queue)
        if checked is not None and 0 <= now - checked[0] < 1.0 and time.monotonic() < checked[1]:
            return []
        rows = jobs_backend(self._db).jobs_read(
            "late_jobs", {"now": now, "queue": queue, "limit": 1}
        )
        if rows:
            self._no_late.pop(queue, None)
            return [str(job) for (job,) in rows]
        # Nothing is late now: asked again once the clock moves on or a moment has passed.
        self._no_late[queue] = (now, time.monotonic() + _LATE_CHECK)
        return []

    def _execute(self, tx: Transaction, task_type: TaskType, messages: list[Message]) -> int:
        """Run the batch's tasks, then settle them all in one commit; how many ran.

        A failed task's own enqueues are rolled back to its savepoint and its
        message given back with its backoff; the others commit. Tasks whose runs
        are used up are finished as failed without running.
        """
        clock = self._jobs.clock
        settled: list[tuple[Message, bool, str | None, float]] = []
        ran = 0
        for message in messages:
            started = clock.now()
            if message.attempts >= task_type.max_attempts:
                settled.append((message, False, _used_up(message), started))
                continue
            ran += 1
            task = Task(message, task_type, tx, self._jobs.types, clock)
            mark = tx.savepoint()
            error = self._observed_call(task_type, task, message)
            if error is None:
                settled.append((message, task.success, task.note, started))
                continue
            try:
                tx.rollback_to(mark)
            except SluiceError:
                # It took messages through task.transaction: only an abort undoes that.
                self._give_back(tx, task_type, message, error)
                tx.abort()
                return ran
            self._give_back(tx, task_type, message, error)
            tx.release(message)
        for message, success, note, started in settled:
            self._settle(tx, task_type, message, success=success, note=note, started=started)
        try:
            tx.commit()
        except (LeaseLost, Conflict):
            # Taken for dead while they ran: the tasks went back and run again elsewhere.
            log.warning("sluice worker: lease lost before a commit; %s task(s) run again", ran)
            return ran
        self.stats.committed(len(settled), sum(not success for _, success, _, _ in settled))
        return ran

    def _observed_call(
        self, task_type: TaskType, task: Task, message: Message
    ) -> BaseException | None:
        """``_call``, inside a ``process {task type}`` span when telemetry is on
        (engine/observe.py): what the task enqueues is traced as its work."""
        observer = self._db.context.observer
        if observer is None:
            return self._call(task_type, task)
        where = Destination(task_type.queue)
        with observer.process(where, [message], operation="process", target=task_type.name) as span:
            error = self._call(task_type, task)
            if error is not None:
                span.end(error)
        return error

    def _call(self, task_type: TaskType, task: Task) -> BaseException | None:
        """Run the task's function in this thread, within its timeout; what it raised."""
        function = self._functions[task_type.name]
        run = _Run(threading.get_ident())
        with self._lock:
            self._running[run.thread] = run
        timer = None
        if task_type.timeout is not None:
            timer = threading.Timer(task_type.timeout, run.interrupt, (TaskTimeout,))
            timer.daemon = True
            timer.start()
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
            return exc
        return None

    def _settle(
        self,
        tx: Transaction,
        task_type: TaskType,
        message: Message,
        *,
        success: bool,
        note: str | None,
        started: float,
    ) -> None:
        """Have the task end with ``tx``: its record, its job's roll-up, the message gone."""
        now = self._jobs.clock.now()
        job = message.properties.get("job")
        used_up = message.attempts >= task_type.max_attempts
        if not success:
            self.stats.finished_failed(task_type, message, note, used_up=used_up)
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
                "attempts": message.attempts + (0 if used_up else 1),
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
        if used_up:
            tx.reject(message, note or "failed")

    def _give_back(
        self, tx: Transaction, task_type: TaskType, message: Message, error: BaseException
    ) -> None:
        """Make the failed run's message wait out its backoff (its last run: none)."""
        shutdown = isinstance(error, WorkerShutdown)
        note = f"{type(error).__name__}: {error}"[:2000]
        attempts = message.attempts + 1
        last = attempts >= task_type.max_attempts
        delay = 0.0 if shutdown or last else task_type.retry_delay(attempts)
        params = {
            "until": self._jobs.clock.now() + delay,
            "note": note,
            "ref": message.ref,
            "session": tx.session,
            "tx": tx.number,
        }
        jobs_backend(self._db).jobs_write([Effect("task_hold_back", params)], durable=False)
        if not shutdown:
            self.stats.run_failed(task_type, message, error, delay)

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


def adapted_size(asked: int, taken: int, seconds: float) -> int:
    """The next adaptive batch size after ``taken`` of ``asked`` tasks took ``seconds``.

    A worker starts at one task per commit and doubles while full batches run
    (with their commit) in well under ``ADAPTIVE_BUDGET``; slow tasks bring it
    down to what fits the budget, so a slow task is settled alone and quick
    ones share a commit. A batch that found fewer tasks ready than asked for
    does not grow it: a trickle of work is settled as it comes.
    """
    fits = ADAPTIVE_BUDGET * taken / seconds if seconds > 0 else float(ADAPTIVE_MAX)
    grown = asked * 2 if taken >= asked else asked
    return max(1, min(ADAPTIVE_MAX, int(fits), grown))


def _used_up(message: Message) -> str:
    return message.error or f"no attempts left after {message.attempts} runs"
