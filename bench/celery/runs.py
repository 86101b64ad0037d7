"""The measurements: throughput and latency of one task kind on one broker, and the kill run.

Every case starts one Celery worker (``-P prefork -c 4``) as a subprocess in its own process
group, on a fresh place (bench.celery.brokers), and learns what the tasks did from the sink
(bench.celery.sink), never from the broker: the same count for every broker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.celery.app import BROKER_ENV, QUEUE_ENV, SINK_ENV, TASK, make_app
from bench.celery.brokers import Broker, Place
from bench.celery.cpu import CpuSample, sample
from bench.celery.sink import Sink
from bench.harness import one_line, percentile, signal_group, start_group, stop_groups

__all__ = ["CONCURRENCY", "KillResult", "RateResult", "kill_run", "rate_run"]

CONCURRENCY = 4
POLL = 0.02
_REPO = Path(__file__).resolve().parents[2]
_READY_TIMEOUT = 60.0


@dataclass
class RateResult:
    """Tasks of ``seconds`` each on one broker: the backlog drained, then a paced stream."""

    broker: str
    seconds: float
    n: int
    durability: str = ""
    enqueue_per_s: float | None = None
    tasks_per_s: float | None = None
    latencies: list[float] = field(default_factory=list)
    rate: float = 0.0  # tasks/s of the paced stream
    status: str = "ok"
    # CPU ms per task while the backlog drained: the worker's main process, its consumer process
    main_cpu_ms: float | None = None
    consumer_process_cpu_ms: float | None = None
    broker_cpu_ms: float | None = None  # the broker's server processes
    machine_cpu_ms: float | None = None  # every process, both cores

    def latency(self, q: float) -> float | None:
        return percentile(self.latencies, q) if self.latencies else None


@dataclass
class KillResult:
    """N tasks while workers are killed ``kills`` times mid-task."""

    broker: str
    target: str  # "pool process" or "whole worker"
    n: int
    kills: int = 0
    done: int = 0
    lost: int = 0
    twice: int = 0
    rerun: int = 0  # tasks started more than once
    seconds: float | None = None  # from the first enqueue to the last task done
    durability: str = ""
    status: str = "ok"


class _Failed(Exception):
    """A case went wrong; the message goes into the report's status column."""


class _Worker:
    """One ``celery worker -P prefork -c 4`` on a place, and its log."""

    def __init__(self, place: Place, sink: Path, logs: Path) -> None:
        self.place, self.sink, self.logs = place, sink, logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, BROKER_ENV: self.place.url, QUEUE_ENV: self.place.queue}
        env.update(self.place.env)
        env[SINK_ENV] = str(self.sink)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
        argv = [sys.executable, "-m", "celery", "-A", "bench.celery.app", "worker"]
        argv += ["-Q", self.place.queue, "-P", "prefork", "-c", str(CONCURRENCY), "-l", "WARNING"]
        # Gossip, mingle and heartbeats are cluster chatter, not part of running tasks.
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        argv += ["-n", f"bench{len(self.procs)}@%h"]
        proc = start_group(argv, env, self.logs / f"worker-{len(self.procs)}.log", cwd=_REPO)
        self.procs.append(proc)
        return proc

    def check(self) -> None:
        live = self.procs[-1] if self.procs else None
        if live is not None and live.poll() is not None:
            raise _Failed(f"the worker exited with code {live.returncode}: {self.tail()}")

    def tail(self, chars: int = 300) -> str:
        paths = sorted(self.logs.glob("worker-*.log"))
        text = paths[-1].read_text(errors="replace")[-chars:] if paths else ""
        return " ".join(text.split())

    def stop(self, grace: float = 10.0) -> None:
        """Celery's warm shutdown (SIGTERM to the main process, as a service manager sends
        it), then SIGKILL to whatever of the process groups is left after ``grace`` s."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(deadline - time.monotonic(), 0.0))
        stop_groups(self.procs, grace=0.0)


@contextlib.contextmanager
def _case(broker: Broker, tmp_root: Path) -> Iterator[tuple[Place, Sink, _Worker, Any]]:
    """A fresh place, sink and (not yet started) worker, the parent's app with the queue
    declared; the worker stopped and the place removed at the end, whatever happens."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-celery-", dir=tmp_root) as tmp,
        broker.place(Path(tmp)) as place,
    ):
        sink = Sink(Path(tmp) / "sink")
        worker = _Worker(place, sink.directory, Path(tmp))
        app = make_app(place.url, place.queue)
        try:
            with app.connection_for_write() as conn:
                # Declared before the first publish: a queue with no consumer yet must keep
                # what is published to it.
                app.amqp.queues[place.queue](conn.default_channel).declare()
            yield place, sink, worker, app
        finally:
            worker.stop()
            app.close()
            if place.url.startswith("sluice+"):
                # The transport keeps this process's Database (and its session's heartbeat)
                # open until exit; it must close before the place is removed.
                from sluice.contrib.kombu import close_databases

                close_databases()


def _enqueue(app: Any, nos: range, seconds: float, pace: float | None = None) -> float:
    """Publish ``probe`` for each number, one durable publish per task (Celery's way); every
    ``pace`` seconds if given. Returns the seconds the publishing took."""
    task = app.tasks[TASK]
    t0 = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for i, no in enumerate(nos):
            if pace is not None:
                delay = t0 + i * pace - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            task.apply_async((no, time.time(), seconds), producer=producer)
    return time.perf_counter() - t0


def _wait(what: str, done: Callable[[], bool], timeout: float, worker: _Worker) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        worker.check()
        if time.monotonic() > deadline:
            raise _Failed(f"{what}: not done after {timeout:g} s; worker log: {worker.tail()}")
        time.sleep(POLL)


def rate_run(
    broker: Broker,
    tmp_root: Path,
    *,
    seconds: float,
    n: int,
    samples: int,
    rate: float,
    timeout: float,
) -> RateResult:
    """Throughput: ``n`` tasks enqueued with no worker running (enqueue tasks/s), then one
    worker started on the backlog: tasks/s from the first task's start to the last one's end.
    Latency: then ``samples`` tasks enqueued one every 1/``rate`` s to the idle worker, each
    from its enqueue (before the publish) to its start."""
    result = RateResult(broker.name, seconds, n, rate=rate)
    try:
        with _case(broker, tmp_root) as (place, sink, worker, app):
            result.durability = place.durability
            backlog = range(n)
            result.enqueue_per_s = n / _enqueue(app, backlog, seconds)
            worker.start()

            cpu: list[tuple[int, CpuSample]] = []  # from the first task done to the last

            def drained() -> bool:
                sink.read()
                done = sink.done(backlog)
                # Read twice only: scanning /proc every poll would take CPU from the worker.
                if done and (not cpu or done == n):
                    now = sample(worker.procs[-1].pid)
                    if now is not None:
                        cpu.append((done, now))
                return done == n

            _wait("backlog", drained, timeout, worker)
            _cpu_per_task(result, cpu)
            first = min(runs[0].start for no, runs in sink.starts.items() if no < n)
            last = max(min(sink.ends[no]) for no in backlog)
            result.tasks_per_s = n / (last - first)
            paced = range(n, n + samples)
            _enqueue(app, paced, seconds, pace=1.0 / rate)

            def answered() -> bool:
                sink.read()
                return sink.done(paced) == samples

            _wait("paced tasks", answered, timeout, worker)
            result.latencies = [sink.starts[no][0].start - sink.starts[no][0].sent for no in paced]
            twice = [no for no in range(n + samples) if len(sink.ends[no]) > 1]
            if twice:
                result.status = f"{len(twice)} tasks ran twice"
    except Exception as exc:  # one failing broker is reported, the others still run
        result.status = one_line(exc)
    return result


def _cpu_per_task(result: RateResult, cpu: list[tuple[int, CpuSample]]) -> None:
    if len(cpu) < 2 or cpu[-1][0] <= cpu[0][0]:
        return
    (done0, first), (done1, last) = cpu[0], cpu[-1]
    tasks = done1 - done0
    result.main_cpu_ms = (last.main - first.main) * 1000 / tasks
    if first.consumer_process is not None and last.consumer_process is not None:
        result.consumer_process_cpu_ms = (
            (last.consumer_process - first.consumer_process) * 1000 / tasks
        )
    result.broker_cpu_ms = last.broker_since(first) * 1000 / tasks
    result.machine_cpu_ms = (last.machine - first.machine) * 1000 / tasks


def _kill(target: str, sink: Sink, worker: _Worker) -> bool:
    """SIGKILL a pool process that is running a task, or the whole worker that is (then start
    another at once). False if no task is running right now."""
    sink.read()
    live = worker.procs[-1]
    for run in sink.running():
        try:
            if os.getpgid(run.pid) != live.pid:
                continue  # a process of a worker killed before, or a reused pid
        except ProcessLookupError:
            continue
        if target == "pool process":
            os.kill(run.pid, signal.SIGKILL)
        else:
            signal_group(live, signal.SIGKILL)
            live.wait(10.0)
            worker.start()
        return True
    return False


def kill_run(
    broker: Broker,
    tmp_root: Path,
    *,
    target: str,
    n: int,
    seconds: float,
    kills: int,
    gap: float,
    settle: float,
) -> KillResult:
    """``n`` tasks of ``seconds`` each enqueued to a running worker; ``kills`` times, at least
    ``gap`` s apart, a task's pool process (or its whole worker) gets SIGKILL while the task
    runs. Then up to ``settle`` s after the last kill for every task to be done."""
    result = KillResult(broker.name, target, n)
    try:
        with _case(broker, tmp_root) as (place, sink, worker, app):
            result.durability = place.durability
            worker.start()
            tasks = range(n)
            t0 = time.time()
            _enqueue(app, tasks, seconds)
            deadline = time.monotonic() + _READY_TIMEOUT
            last_kill = 0.0
            while result.kills < kills and time.monotonic() < deadline:
                worker.check()
                if time.monotonic() - last_kill >= gap and _kill(target, sink, worker):
                    result.kills += 1
                    last_kill = time.monotonic()
                time.sleep(POLL)
            settle_until = time.monotonic() + settle
            while time.monotonic() < settle_until:
                sink.read()
                if sink.done(tasks) == n:
                    break
                worker.check()
                time.sleep(POLL)
            sink.read()
            result.done = sink.done(tasks)
            result.lost = n - result.done
            result.twice = sum(1 for no in tasks if len(sink.ends[no]) > 1)
            result.rerun = sum(1 for no in tasks if len(sink.starts[no]) > 1)
            if result.done == n:
                result.seconds = max(min(sink.ends[no]) for no in tasks) - t0
            if result.kills < kills:
                result.status = f"only {result.kills} of {kills} kills: no task was running"
    except Exception as exc:
        result.status = one_line(exc)
    return result
