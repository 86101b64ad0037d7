"""The peer side of the worker-throughput benchmark: Celery, Dramatiq, RQ and procrastinate.

Every peer does the same work: start ``workers`` worker processes against an empty queue, wait
until they are connected and idle and have run a few warm-up tasks, then enqueue N no-op tasks
in the peer's fastest bulk way and time until the broker says the last one is done (polled
every 20 ms, counted on the broker, never by the task). In mode ``live`` the clock starts at
the first enqueue and the workers consume meanwhile; in mode ``backlog`` the workers are
stopped (SIGSTOP) during the enqueue and the clock starts when they are continued. A peer not
done after the deadline is measured on the tasks it finished by then, so a slow peer cannot
hold the run.

The Redis peers run twice: on the shared Redis, which keeps nothing on disk, and on a private
``redis-server`` with ``appendfsync always`` (every write fsynced before its reply, the
durability of a PostgreSQL commit). procrastinate runs on the shared PostgreSQL, in a database
it creates and drops.

Run: ``python -m bench jobs-peers [--n 20000] [--workers 4] [--mode live|backlog|both]``;
prints a Markdown report.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import (
    PG_CONNINFO,
    RedisTarget,
    host_facts,
    one_line,
    package_versions,
    pg_facts,
    private_redis,
    redis_target,
    signal_group,
    start_group,
    stop_groups,
)
from bench.jobs.tasks import PG_DSN_ENV, QUEUE, REDIS_URL_ENV

__all__ = [
    "CELERY_SHAPES",
    "DEFAULT_N",
    "DEFAULT_WORKERS",
    "MODES",
    "PeerResult",
    "render",
    "run_celery",
    "run_dramatiq",
    "run_peers",
    "run_procrastinate",
    "run_rq",
]

SHARED_REDIS_URL = "redis://127.0.0.1:6379"
# One Redis database per peer on the shared server, so that clean-up can empty it whole. The
# benchmark refuses a database that holds keys it did not put there (see _claim_db).
REDIS_DBS = {"celery": 12, "dramatiq": 13, "rq": 14}
PROCRASTINATE_DB = "bench_procrastinate"
DEFAULT_N = 20_000
DEFAULT_WORKERS = 4
# Seconds from the start of the clock: a peer still running then is measured on the tasks it
# finished by then, so that slow peers keep the whole run bounded.
DEFAULT_TIMEOUT = 120.0
READY_TIMEOUT = 60.0
WARMUP_TIMEOUT = 60.0
POLL = 0.02
WARMUP_PER_WORKER = 5
BULK = 1_000  # tasks per bulk call, for the peers that enqueue in bulk
CELERY_SHAPES = ("prefork", "solo", "prefork-1")
MODES = ("live", "backlog")
_OWNER_KEY = "sluice-bench:owner"
_REPO = Path(__file__).resolve().parents[2]
_DISTRIBUTIONS = ("celery", "kombu", "dramatiq", "rq", "redis", "procrastinate", "psycopg")


@dataclass(frozen=True)
class PeerResult:
    """One peer's run; ``mode`` says when the clock starts (see ``_run_tasks``).

    ``done`` is ``n`` unless the deadline came first: then the rate is over the tasks done
    by the deadline, and ``seconds`` is the time to the deadline.
    """

    peer: str
    broker: str
    durability: str
    workers: str
    mode: str  # "live" or "backlog"
    n: int
    done: int | None
    seconds: float | None
    tasks_per_s: float | None
    enqueue_seconds: float | None
    left_after_enqueue: int | None  # tasks not yet done when the enqueue returned
    status: str  # "ok", or what went wrong


class _Failed(Exception):
    """A peer's run went wrong; the message goes into the report's status column."""


# ------------------------------------------------------------------------------ Redis servers


def _claim_db(client: Any, what: str) -> None:
    """Make sure the benchmark has this Redis database to itself, then empty it."""
    if client.dbsize() and not client.exists(_OWNER_KEY):
        raise _Failed(
            f"{what} holds keys that bench.jobs.peers did not put there; empty it or change"
            " REDIS_DBS in bench/jobs/peers.py"
        )
    client.flushdb()
    client.set(_OWNER_KEY, "bench.jobs.peers")


# ------------------------------------------------------------------------------ processes


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A worker in its own process group (so its children stop with it), output to ``log``."""
    return start_group(argv, env, log, cwd=_REPO)


def _tail(paths: Sequence[Path], chars: int = 400) -> str:
    text = " / ".join(p.read_text(errors="replace")[-chars:] for p in paths if p.exists())
    return " ".join(text.split())


# ------------------------------------------------------------------------------ peers


class _Driver(ABC):
    """What the measurement needs from one peer; every count comes from the broker."""

    peer: str
    broker: str
    durability: str
    shape: str

    @abstractmethod
    def reset(self) -> None:
        """Start from an empty broker: nothing queued, no workers registered."""

    @abstractmethod
    def commands(self) -> list[list[str]]:
        """The worker command lines (one subprocess each)."""

    @abstractmethod
    def env(self) -> dict[str, str]:
        """Environment variables that point the workers at the broker."""

    @abstractmethod
    def ready(self) -> bool:
        """Whether every worker is connected and waiting for tasks."""

    @abstractmethod
    def enqueue(self, n: int) -> None:
        """Enqueue ``n`` no-op tasks in the peer's fastest bulk way."""

    @abstractmethod
    def remaining(self, total: int) -> int:
        """Tasks not yet done, of the ``total`` enqueued since reset."""

    def finished(self, total: int) -> bool:
        """Whether every task is done; polled every 20 ms, so a peer may make it cheaper."""
        return self.remaining(total) == 0

    @abstractmethod
    def verify(self, total: int) -> str:
        """'' if the broker shows ``total`` tasks run successfully, else what it shows."""

    @abstractmethod
    def cleanup(self) -> None:
        """Remove what the run left in the broker and close connections."""


def _redis_broker(target: RedisTarget, db: int) -> str:
    where = target.url.removeprefix("redis://")
    return f"Redis {target.version} {target.label} ({where}/{db})"


class _Celery(_Driver):
    peer = "celery"

    def __init__(self, target: RedisTarget, workers: int, shape: str, prefetch: int | None) -> None:
        import redis

        from bench.jobs.tasks import celery_app

        if shape not in CELERY_SHAPES:
            raise _Failed(f"unknown Celery shape {shape!r}: choose one of {CELERY_SHAPES}")
        self.prefetch = celery_app.DEFAULT_PREFETCH if prefetch is None else prefetch
        self.url = f"{target.url}/{REDIS_DBS['celery']}"
        self.app = celery_app.make_app(self.url, self.prefetch)
        self.client = redis.Redis.from_url(self.url, socket_timeout=10)
        self.broker = _redis_broker(target, REDIS_DBS["celery"])
        self.durability = (
            f"{target.durability}. acks_late: a task stays in the `unacked` hash until it ran;"
            " a killed worker's is redelivered after the visibility timeout (1 h)"
        )
        # (processes, pool, concurrency of each)
        self.nodes, self.pool, self.concurrency = {
            "prefork": (1, "prefork", workers),
            "solo": (workers, "solo", 1),
            "prefork-1": (workers, "prefork", 1),
        }[shape]
        options = "-c 1 " if shape == "prefork-1" else ""
        options += f"-c {workers} " if shape == "prefork" else ""
        self.shape = (
            f"{self.nodes} x `celery worker -P {self.pool} {options}--without-gossip"
            f" --without-mingle --without-heartbeat`, prefetch multiplier {self.prefetch}"
        )

    def reset(self) -> None:
        _claim_db(self.client, f"Redis database {REDIS_DBS['celery']}")

    def env(self) -> dict[str, str]:
        from bench.jobs.tasks.celery_app import PREFETCH_ENV

        return {REDIS_URL_ENV: self.url, PREFETCH_ENV: str(self.prefetch)}

    def commands(self) -> list[list[str]]:
        argv = [sys.executable, "-m", "celery", "-A", "bench.jobs.tasks.celery_app"]
        argv += ["worker", "-Q", QUEUE, "-l", "WARNING", "-P", self.pool]
        argv += ["-c", str(self.concurrency)]
        # Gossip, mingle and heartbeats are cluster chatter, not part of running tasks.
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        return [[*argv, "-n", f"bench{i}@%h"] for i in range(self.nodes)]

    def ready(self) -> bool:
        replies = self.app.control.ping(timeout=0.5) or []
        return len(replies) >= self.nodes

    def enqueue(self, n: int) -> None:
        task = self.app.tasks["noop"]
        # kombu's publish batch pipelines the LPUSHes, flushing every BULK messages.
        with self.app.producer_or_acquire() as producer, producer.batch(max_size=BULK):
            for _ in range(n):
                task.apply_async(producer=producer)

    def remaining(self, total: int) -> int:
        # Queued (list) plus delivered but not yet acknowledged (the transport's unacked hash).
        pipe = self.client.pipeline(transaction=False)
        pipe.llen(QUEUE)
        pipe.hlen("unacked")
        queued, unacked = pipe.execute()
        return int(queued) + int(unacked)

    def verify(self, total: int) -> str:
        stats = self.app.control.inspect(timeout=2.0).stats() or {}
        ran = sum(int(s.get("total", {}).get("noop", 0)) for s in stats.values())
        if len(stats) < self.nodes:
            return f"only {len(stats)} of {self.nodes} Celery nodes answered `inspect stats`"
        return "" if ran == total else f"workers report {ran} tasks run, expected {total}"

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.client.flushdb()
        self.client.close()
        self.app.close()


class _Dramatiq(_Driver):
    peer = "dramatiq"

    def __init__(self, target: RedisTarget, workers: int, threads: int) -> None:
        import redis

        from bench.jobs.tasks import dramatiq_app

        self.url = f"{target.url}/{REDIS_DBS['dramatiq']}"
        self.broker_obj = dramatiq_app.make_broker(self.url)
        self.actor = dramatiq_app.declare(self.broker_obj)
        self.client = redis.Redis.from_url(self.url, socket_timeout=10)
        self.ns = dramatiq_app.NAMESPACE
        self.workers, self.threads = workers, threads
        self.broker = _redis_broker(target, REDIS_DBS["dramatiq"])
        self.durability = (
            f"{target.durability}. Acked after the task ran; a dead worker's unacked"
            " messages are requeued once its heartbeat expires"
        )
        self.shape = (
            f"1 `dramatiq --processes {workers} --threads {threads}` (prefetch 2 x threads"
            " per process)"
        )

    def reset(self) -> None:
        _claim_db(self.client, f"Redis database {REDIS_DBS['dramatiq']}")

    def env(self) -> dict[str, str]:
        return {REDIS_URL_ENV: self.url}

    def commands(self) -> list[list[str]]:
        argv = [sys.executable, "-m", "dramatiq", "bench.jobs.tasks.dramatiq_app", "-Q"]
        argv += [QUEUE, "--processes", str(self.workers), "--threads", str(self.threads)]
        return [argv]

    def ready(self) -> bool:
        # Every worker process's consumer stamps its broker id into the heartbeat set on each
        # fetch; the parent has not fetched or enqueued yet.
        return int(self.client.zcard(f"{self.ns}:__heartbeats__")) >= self.workers

    def enqueue(self, n: int) -> None:
        send = self.actor.send  # Dramatiq has no bulk enqueue: one Lua call per message
        for _ in range(n):
            send()

    def remaining(self, total: int) -> int:
        # A message stays in the queue's .msgs hash from enqueue until its ack.
        pipe = self.client.pipeline(transaction=False)
        pipe.hlen(f"{self.ns}:{QUEUE}.msgs")
        pipe.hlen(f"{self.ns}:{QUEUE}.DQ.msgs")
        return sum(int(x) for x in pipe.execute())

    def verify(self, total: int) -> str:
        dead = int(self.client.zcard(f"{self.ns}:{QUEUE}.XQ"))
        return f"{dead} messages dead-lettered" if dead else ""

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.client.flushdb()
        self.client.close()
        self.broker_obj.close()


class _Rq(_Driver):
    def __init__(self, target: RedisTarget, workers: int, simple: bool) -> None:
        import redis
        from rq import Queue

        self.url = f"{target.url}/{REDIS_DBS['rq']}"
        self.client = redis.Redis.from_url(self.url, socket_timeout=10)
        self.queue = Queue(QUEUE, connection=self.client)
        self.workers, self.simple = workers, simple
        self.peer = "rq SimpleWorker" if simple else "rq"
        self.broker = _redis_broker(target, REDIS_DBS["rq"])
        self.durability = (
            f"{target.durability}. A job runs once: a dead worker's job goes to the failed"
            " registry, not back to the queue"
        )
        kind = "SimpleWorker: runs the job in the worker" if simple else "Worker: forks per job"
        self.shape = f"{workers} x `rq worker` ({kind}; task module preloaded with `-c`)"

    def reset(self) -> None:
        _claim_db(self.client, f"Redis database {REDIS_DBS['rq']}")

    def env(self) -> dict[str, str]:
        return {REDIS_URL_ENV: self.url}

    def commands(self) -> list[list[str]]:
        argv = [sys.executable, "-m", "rq.cli", "worker", "-c", "bench.jobs.tasks.rq_tasks"]
        argv += ["--logging_level", "WARNING"]
        if self.simple:
            argv += ["-w", "rq.worker.SimpleWorker"]
        return [[*argv, "-n", f"bench-{i}", QUEUE] for i in range(self.workers)]

    def ready(self) -> bool:
        from rq import Worker

        found = Worker.all(queue=self.queue)
        return len(found) >= self.workers and all(w.get_state() == "idle" for w in found)

    def enqueue(self, n: int) -> None:
        from rq import Queue

        func = "bench.jobs.tasks.rq_tasks.noop"
        for start in range(0, n, BULK):
            batch = [Queue.prepare_data(func) for _ in range(min(BULK, n - start))]
            self.queue.enqueue_many(batch)  # one pipeline per batch

    def _done(self) -> tuple[int, int]:
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.queue.finished_job_registry.key)
        pipe.zcard(self.queue.failed_job_registry.key)
        finished, failed = pipe.execute()
        return int(finished), int(failed)

    def remaining(self, total: int) -> int:
        # A dequeued job is in no list for a moment before the started registry: count what
        # has ended instead.
        return total - sum(self._done())

    def verify(self, total: int) -> str:
        finished, failed = self._done()
        return "" if (finished, failed) == (total, 0) else f"{finished} finished, {failed} failed"

    def cleanup(self) -> None:
        with contextlib.suppress(Exception):
            self.client.flushdb()
        self.client.close()


def _pg_dsn(database: str) -> str:
    return PG_CONNINFO.rsplit("/", 1)[0] + "/" + database


class _Procrastinate(_Driver):
    peer = "procrastinate"

    def __init__(self, workers: int, concurrency: int) -> None:
        self.dsn = _pg_dsn(PROCRASTINATE_DB)
        self.workers, self.concurrency = workers, concurrency
        self.app: Any = None
        self.conn: Any = None
        self.broker = f"PostgreSQL 127.0.0.1:5432, database {PROCRASTINATE_DB}"
        self.durability = "PostgreSQL"
        self.shape = (
            f"{workers} x `procrastinate worker --concurrency {concurrency}`"
            " (LISTEN/NOTIFY on; async no-op task; jobs kept as `succeeded`)"
        )

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(PG_CONNINFO, autocommit=True, connect_timeout=10) as admin:
            admin.execute(sql)

    def reset(self) -> None:
        import psycopg

        from bench.jobs.tasks.procrastinate_app import make_app

        self._admin(f"DROP DATABASE IF EXISTS {PROCRASTINATE_DB} WITH (FORCE)")
        self._admin(f"CREATE DATABASE {PROCRASTINATE_DB}")
        self.app = make_app(self.dsn)
        self.app.open()
        self.app.schema_manager.apply_schema()
        self.conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        rows = self.conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit')"
        ).fetchall()
        settings = ", ".join(f"{name}={value}" for name, value in sorted(rows))
        self.durability = (
            f"PostgreSQL {settings}: every defer, fetch and finish is a committed transaction."
            " A dead worker's job stays `doing` until retried as stalled"
        )

    def env(self) -> dict[str, str]:
        return {PG_DSN_ENV: self.dsn}

    def commands(self) -> list[list[str]]:
        argv = [sys.executable, "-m", "procrastinate", "--app"]
        argv += ["bench.jobs.tasks.procrastinate_app.app", "worker", "--queues", QUEUE]
        argv += ["--concurrency", str(self.concurrency)]
        return [[*argv, "--name", f"bench-{i}"] for i in range(self.workers)]

    def _count(self, sql: str) -> int:
        row = self.conn.execute(sql).fetchone()
        return int(row[0])

    def ready(self) -> bool:
        return self._count("SELECT count(*) FROM procrastinate_workers") >= self.workers

    def enqueue(self, n: int) -> None:
        task = self.app.tasks["noop"]
        for start in range(0, n, BULK):
            task.batch_defer(*([{}] * min(BULK, n - start)))  # one INSERT per batch

    def remaining(self, total: int) -> int:
        return self._count(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        )

    def finished(self, total: int) -> bool:
        # Counting thousands of rows 50 times a second would take CPU from the workers; the
        # partial index on status IN ('todo', 'doing') answers this from its first entry.
        row = self.conn.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))"
        ).fetchone()
        return bool(row[0])

    def verify(self, total: int) -> str:
        done = self._count("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
        every = self._count("SELECT count(*) FROM procrastinate_jobs")
        return "" if done == every == total else f"{done} succeeded of {every} jobs"

    def cleanup(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.app is not None:
            with contextlib.suppress(Exception):
                self.app.close()
        self._admin(f"DROP DATABASE IF EXISTS {PROCRASTINATE_DB} WITH (FORCE)")


# ------------------------------------------------------------------------------ measurement


def _check_alive(what: str, procs: Sequence[subprocess.Popen[bytes]]) -> None:
    dead = [p for p in procs if p.poll() is not None]
    if dead:
        raise _Failed(f"{what}: a worker exited with code {dead[0].returncode}")


def _wait(
    what: str, done: Callable[[], bool], timeout: float, procs: Sequence[subprocess.Popen[bytes]]
) -> None:
    """Poll until ``done()`` holds; fail after ``timeout`` seconds or if a worker exits."""
    deadline = time.monotonic() + timeout
    while not done():
        _check_alive(what, procs)
        if time.monotonic() > deadline:
            raise _Failed(f"{what}: not done after {timeout:g} s")
        time.sleep(POLL)


def _drain(
    driver: _Driver,
    procs: Sequence[subprocess.Popen[bytes]],
    *,
    total: int,
    t0: float,
    timeout: float,
) -> tuple[float, int]:
    """Poll until no task is left or ``timeout`` seconds after ``t0``.

    Returns (seconds from ``t0`` to when nothing was left, or to the deadline; tasks left).
    Nothing left must hold on two polls in a row, the time being the first: a task caught
    between two broker structures (popped from the list, not yet in the unacknowledged set)
    must not look like the end.
    """
    first: float | None = None
    while True:
        now = time.perf_counter()
        if driver.finished(total):
            if first is not None:
                return first - t0, 0
            first = now
        else:
            first = None
        if now - t0 > timeout:
            return now - t0, driver.remaining(total)
        _check_alive("tasks", procs)
        time.sleep(POLL)


@dataclass(frozen=True)
class _Timing:
    seconds: float
    enqueue_seconds: float
    left_after_enqueue: int
    done: int


def _run_tasks(
    driver: _Driver,
    procs: Sequence[subprocess.Popen[bytes]],
    *,
    n: int,
    total: int,
    mode: str,
    timeout: float,
) -> _Timing:
    """Enqueue ``n`` tasks and time them until all are done or ``timeout`` seconds passed.

    live: the workers consume while the enqueue runs; the clock starts at the first enqueue.
    backlog: the workers are stopped (SIGSTOP) during the enqueue, so the clock, started when
    they are continued, times the workers alone on a full queue.
    """
    if mode == "backlog":
        for proc in procs:
            signal_group(proc, signal.SIGSTOP)
    t0 = time.perf_counter()
    driver.enqueue(n)
    enqueue_seconds = time.perf_counter() - t0
    left_after_enqueue = driver.remaining(total)
    if mode == "backlog":
        t0 = time.perf_counter()
        for proc in procs:
            signal_group(proc, signal.SIGCONT)
    seconds, left = _drain(driver, procs, total=total, t0=t0, timeout=timeout)
    return _Timing(seconds, enqueue_seconds, left_after_enqueue, n - left)


def _measure(driver: _Driver, n: int, workers: int, mode: str, timeout: float) -> PeerResult:
    """Start the workers, wait until ready, warm up, run ``n`` tasks; stop and clean up."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: choose one of {MODES}")
    procs: list[subprocess.Popen[bytes]] = []
    timing: _Timing | None = None
    status = "ok"
    with tempfile.TemporaryDirectory(prefix=f"sluice-bench-{driver.peer.replace(' ', '-')}-") as t:
        logs: list[Path] = []
        try:
            driver.reset()
            env = {**os.environ, **driver.env()}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
            for i, argv in enumerate(driver.commands()):
                logs.append(Path(t) / f"worker-{i}.log")
                procs.append(_start(argv, env, logs[-1]))
            _wait("workers ready", driver.ready, READY_TIMEOUT, procs)
            warm = WARMUP_PER_WORKER * workers
            driver.enqueue(warm)
            _wait("warm-up", lambda: driver.finished(warm), WARMUP_TIMEOUT, procs)
            total = warm + n
            timing = _run_tasks(driver, procs, n=n, total=total, mode=mode, timeout=timeout)
            # A run cut short by the deadline has no total to check.
            problem = driver.verify(total) if timing.done == n else ""
            if problem:
                status = f"check failed: {problem}"
        except Exception as exc:  # one failing peer is reported, the others still run
            status = one_line(exc)
            tail = _tail(logs)
            if tail:
                status += f" [worker log: ...{tail[-300:]}]"
        finally:
            stop_groups(procs)
            with contextlib.suppress(Exception):
                driver.cleanup()
    ok = status == "ok" and timing is not None and timing.seconds > 0
    return PeerResult(
        peer=driver.peer,
        broker=driver.broker,
        durability=driver.durability,
        workers=driver.shape,
        mode=mode,
        n=n,
        done=timing.done if timing else None,
        seconds=timing.seconds if timing and ok else None,
        tasks_per_s=timing.done / timing.seconds if timing and ok else None,
        enqueue_seconds=timing.enqueue_seconds if timing else None,
        left_after_enqueue=timing.left_after_enqueue if timing else None,
        status=status,
    )


def _failed(peer: str, broker: str, n: int, exc: BaseException) -> PeerResult:
    return PeerResult(peer, broker, "-", "-", "-", n, None, None, None, None, None, one_line(exc))


def _shared() -> RedisTarget:
    return redis_target(SHARED_REDIS_URL, "shared")


def run_celery(
    n: int = DEFAULT_N,
    workers: int = DEFAULT_WORKERS,
    *,
    target: RedisTarget | None = None,
    shape: str = "solo",
    prefetch: int | None = None,
    mode: str = "live",
    timeout: float = DEFAULT_TIMEOUT,
) -> PeerResult:
    """Celery on Redis: ``shape`` is one of ``CELERY_SHAPES``; prefetch None = Celery's (4)."""
    try:
        driver = _Celery(target or _shared(), workers, shape, prefetch)
    except Exception as exc:
        return _failed("celery", "Redis", n, exc)
    return _measure(driver, n, workers, mode, timeout)


def run_dramatiq(
    n: int = DEFAULT_N,
    workers: int = DEFAULT_WORKERS,
    *,
    target: RedisTarget | None = None,
    threads: int = 8,
    mode: str = "live",
    timeout: float = DEFAULT_TIMEOUT,
) -> PeerResult:
    """Dramatiq on Redis: one ``dramatiq`` command, ``workers`` processes x ``threads`` (its
    default, 8)."""
    try:
        driver = _Dramatiq(target or _shared(), workers, threads)
    except Exception as exc:
        return _failed("dramatiq", "Redis", n, exc)
    return _measure(driver, n, workers, mode, timeout)


def run_rq(
    n: int = DEFAULT_N,
    workers: int = DEFAULT_WORKERS,
    *,
    target: RedisTarget | None = None,
    simple: bool = False,
    mode: str = "live",
    timeout: float = DEFAULT_TIMEOUT,
) -> PeerResult:
    """RQ on Redis: ``workers`` ``rq worker`` processes, forking per job unless ``simple``."""
    try:
        driver = _Rq(target or _shared(), workers, simple)
    except Exception as exc:
        return _failed("rq SimpleWorker" if simple else "rq", "Redis", n, exc)
    return _measure(driver, n, workers, mode, timeout)


def run_procrastinate(
    n: int = DEFAULT_N,
    workers: int = DEFAULT_WORKERS,
    *,
    concurrency: int = 1,
    mode: str = "live",
    timeout: float = DEFAULT_TIMEOUT,
) -> PeerResult:
    """procrastinate on PostgreSQL: ``workers`` worker processes, in a database of its own."""
    return _measure(_Procrastinate(workers, concurrency), n, workers, mode, timeout)


def _redis_peers(
    n: int, workers: int, target: RedisTarget, mode: str, only: Collection[str] | None
) -> list[PeerResult]:
    runs: list[tuple[str, Callable[[], PeerResult]]] = [
        ("celery", lambda: run_celery(n, workers, target=target, mode=mode)),
        ("dramatiq", lambda: run_dramatiq(n, workers, target=target, mode=mode)),
        ("rq", lambda: run_rq(n, workers, target=target, mode=mode)),
        ("rq", lambda: run_rq(n, workers, target=target, simple=True, mode=mode)),
    ]
    return [run() for name, run in runs if only is None or name in only]


def run_peers(
    n: int = DEFAULT_N,
    workers: int = DEFAULT_WORKERS,
    *,
    modes: Sequence[str] = ("live",),
    only: Collection[str] | None = None,
) -> list[PeerResult]:
    """Every peer once per durability and mode: the Redis peers on the shared Redis (nothing
    on disk) and on a private ``appendfsync always`` one, then procrastinate on PostgreSQL.

    ``only``: the peers to run by name (celery, dramatiq, rq, procrastinate); all by default.
    """
    results: list[PeerResult] = []
    for mode in modes:
        try:
            results += _redis_peers(n, workers, _shared(), mode, only)
        except Exception as exc:
            results.append(_failed("Redis peers", f"shared Redis {SHARED_REDIS_URL}", n, exc))
    try:
        with private_redis("always") as url:
            target = redis_target(url, "private")
            for mode in modes:
                results += _redis_peers(n, workers, target, mode, only)
    except Exception as exc:
        results.append(_failed("Redis peers", "private redis-server", n, exc))
    if only is None or "procrastinate" in only:
        results += [run_procrastinate(n, workers, mode=mode) for mode in modes]
    return results


# ------------------------------------------------------------------------------ report


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _redis_facts() -> list[tuple[str, str]]:
    try:
        shared = _shared()
    except Exception as exc:
        return [("Redis", f"unreachable at {SHARED_REDIS_URL}: {one_line(exc)}")]
    return [("Redis", f"{shared.version} at {SHARED_REDIS_URL}: {shared.durability}")]


def render(
    results: Sequence[PeerResult],
    workers: int,
    *,
    load_before: tuple[float, float, float] | None = None,
) -> str:
    """The Markdown report: machine and servers, workload, one row per peer, durability, mode.

    ``load_before`` is the load average taken before the runs: on a 2-core machine anything
    else running skews the figures.
    """
    facts = host_facts()
    if load_before is not None:
        facts.append(
            ("Load average before (1, 5, 15 min)", ", ".join(f"{x:.2f}" for x in load_before))
        )
    facts += _redis_facts() + pg_facts()
    facts.append(("Packages", package_versions(_DISTRIBUTIONS)))
    out = ["# Worker throughput of Python peers, no-op tasks", "", "| | |", "|---|---|"]
    out += [f"| {key} | {value} |" for key, value in facts]
    out += [
        "",
        f"{workers} worker processes per peer, started against an empty queue, connected,"
        f" idle and warmed up with {WARMUP_PER_WORKER * workers} tasks; then N no-op tasks"
        f" enqueued in the peer's bulk way (batches of {BULK:,} where it has one). Mode live:"
        " the workers consume while the enqueue runs, seconds = first enqueue to last task"
        " done. Mode backlog: the workers are stopped (SIGSTOP) during the enqueue and"
        " continued after it, seconds = continue to last task done. Done = as the broker counts"
        f" it, polled every {POLL * 1000:g} ms. A peer not done {DEFAULT_TIMEOUT:g} s after"
        " the clock started is measured on the tasks it had done by then (done < N)."
        " tasks/s = done / seconds; enqueue s = how long the enqueue of N took; left = tasks"
        " not done when it returned.",
        "",
        "| peer | broker | mode | N | done | tasks/s | seconds | enqueue s | left | status |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        out.append(
            f"| {r.peer} | {r.broker} | {r.mode} | {r.n:,} | {_fmt(r.done, ',d')}"
            f" | {_fmt(r.tasks_per_s, ',.0f')} | {_fmt(r.seconds, '.2f')}"
            f" | {_fmt(r.enqueue_seconds, '.2f')} | {_fmt(r.left_after_enqueue, ',d')}"
            f" | {r.status} |"
        )
    out += ["", "Workers and durability:", ""]
    seen: set[tuple[str, str]] = set()
    for r in results:
        if (r.peer, r.durability) not in seen and r.workers != "-":
            seen.add((r.peer, r.durability))
            out.append(f"- **{r.peer}** on {r.broker}: {r.workers}. Durability: {r.durability}.")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench jobs-peers",
        description="Worker throughput of Celery, Dramatiq, RQ and procrastinate (no-op tasks).",
    )
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="tasks per peer run")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="worker processes")
    parser.add_argument(
        "--mode",
        choices=[*MODES, "both"],
        default="live",
        help="live: enqueue while the workers run (default); backlog: workers stopped during"
        " the enqueue; both",
    )
    args = parser.parse_args(argv)
    modes = MODES if args.mode == "both" else (args.mode,)
    load = os.getloadavg()
    results = run_peers(args.n, args.workers, modes=modes)
    print(render(results, args.workers, load_before=load))
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
