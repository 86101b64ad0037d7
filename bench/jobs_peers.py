"""The peer side of the worker-throughput benchmark: Celery, Dramatiq, RQ and procrastinate.

Every peer does the same work: start ``workers`` worker processes against an empty queue, wait
until they are connected and idle and have run a few warm-up tasks, then enqueue N no-op tasks
in the peer's fastest bulk way and time from the first enqueue until the broker says the last
one is done (polled every 20 ms, counted on the broker, never by the task). The Redis peers run
twice: on the shared Redis, which keeps nothing on disk, and on a private ``redis-server`` with
``appendfsync always`` (one fsync per write before the reply, the durability of a PostgreSQL
commit). procrastinate runs on the shared PostgreSQL, in a database it creates and drops.

Run: ``python -m bench.jobs_peers [--n 20000] [--workers 4]``; prints a Markdown report.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import filesystem_of
from bench.jobs_peer_tasks import PG_DSN_ENV, QUEUE, REDIS_URL_ENV
from bench.pg_common import PG_CONNINFO, host_facts, one_line, package_versions, pg_facts

__all__ = [
    "CELERY_SHAPES",
    "PeerResult",
    "RedisTarget",
    "private_redis",
    "redis_target",
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
DEFAULT_TIMEOUT = 120.0  # seconds from the first enqueue to the last task done
READY_TIMEOUT = 60.0
POLL = 0.02
WARMUP_PER_WORKER = 5
BULK = 1_000  # tasks per bulk call, for the peers that enqueue in bulk
CELERY_SHAPES = ("prefork", "solo", "prefork-1")
_OWNER_KEY = "sluice-bench:owner"
_REPO = Path(__file__).resolve().parent.parent
_DISTRIBUTIONS = ("celery", "kombu", "dramatiq", "rq", "redis", "procrastinate", "psycopg")


@dataclass(frozen=True)
class PeerResult:
    """One peer's run. ``seconds`` runs from the first enqueue to the last task done."""

    peer: str
    broker: str
    durability: str
    workers: str
    n: int
    seconds: float | None
    tasks_per_s: float | None
    enqueue_seconds: float | None
    left_after_enqueue: int | None  # tasks not yet done when the enqueue returned
    status: str  # "ok", or what went wrong


@dataclass(frozen=True)
class RedisTarget:
    """A Redis server to measure on: base URL (no database), label and what it keeps on disk."""

    url: str
    label: str
    durability: str
    version: str


class _Failed(Exception):
    """A peer's run went wrong; the message goes into the report's status column."""


# ------------------------------------------------------------------------------ Redis servers


def redis_target(url: str, label: str) -> RedisTarget:
    """Describe a Redis server from its own configuration, read back over the connection."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        config = client.config_get("*")
        version = str(client.info("server")["redis_version"])
    finally:
        client.close()
    if config.get("appendonly") == "yes":
        fsync = config.get("appendfsync", "?")
        device, _mount, fstype = filesystem_of(Path(str(config.get("dir", "/"))))
        when = {
            "always": "an fsync of every write before the reply",
            "everysec": "an fsync once a second (up to ~1 s of acknowledged writes lost)",
            "no": "no fsync (the OS flushes when it likes)",
        }.get(fsync, fsync)
        text = f"AOF appendfsync {fsync}: {when}; {fstype} on {device}"
    elif config.get("save"):
        text = f"RDB snapshots only (save '{config['save']}'): recent writes lost on a crash"
    else:
        text = "nothing on disk (appendonly no, save ''): a restart loses every queued task"
    return RedisTarget(url=url, label=label, durability=text, version=version)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_redis(appendfsync: str = "always") -> Iterator[str]:
    """A private redis-server on a free loopback port, AOF on, in a temporary directory.

    Yields its base URL; the server is stopped and its directory removed afterwards.
    """
    import redis

    redis_server = shutil.which("redis-server")
    if redis_server is None:
        raise _Failed("redis-server is not on PATH: install it (apt-get install redis-server)")
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-redis-"))
    port = _free_port()
    argv = [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp)]
    argv += ["--appendonly", "yes", "--appendfsync", appendfsync, "--save", ""]
    argv += ["--daemonize", "no", "--logfile", str(tmp / "redis.log")]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"redis://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 10.0
        while True:
            client = redis.Redis.from_url(url, socket_timeout=1)
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = (tmp / "redis.log").read_text() if (tmp / "redis.log").exists() else ""
                    raise _Failed(f"private redis-server did not start: {log[-300:]}") from None
                time.sleep(0.05)
            finally:
                client.close()
        yield url
    finally:
        _stop([proc])
        shutil.rmtree(tmp, ignore_errors=True)


def _claim_db(client: Any, what: str) -> None:
    """Make sure the benchmark has this Redis database to itself, then empty it."""
    if client.dbsize() and not client.exists(_OWNER_KEY):
        raise _Failed(
            f"{what} holds keys that bench.jobs_peers did not put there; empty it or change"
            " REDIS_DBS in bench/jobs_peers.py"
        )
    client.flushdb()
    client.set(_OWNER_KEY, "bench.jobs_peers")


# ------------------------------------------------------------------------------ processes


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A worker in its own process group (so its children stop with it), output to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            cwd=_REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _stop(procs: Sequence[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """SIGTERM each process group, SIGKILL what is left after ``grace`` seconds."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(deadline - time.monotonic(), 0.0))
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)  # also the group's children if the leader is gone
        if proc.poll() is None:
            proc.wait(10.0)


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
    def commands(self, workers: int) -> list[list[str]]:
        """The worker command lines (one subprocess each)."""

    @abstractmethod
    def env(self) -> dict[str, str]:
        """Environment variables that point the workers at the broker."""

    @abstractmethod
    def ready(self, workers: int) -> bool:
        """Whether every worker is connected and waiting for tasks."""

    @abstractmethod
    def enqueue(self, n: int) -> None:
        """Enqueue ``n`` no-op tasks in the peer's fastest bulk way."""

    @abstractmethod
    def remaining(self, total: int) -> int:
        """Tasks not yet done, of the ``total`` enqueued since reset."""

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

    def __init__(self, target: RedisTarget, shape: str, prefetch: int | None) -> None:
        import redis

        from bench.jobs_peer_tasks import celery_app

        if shape not in CELERY_SHAPES:
            raise _Failed(f"unknown Celery shape {shape!r}: choose one of {CELERY_SHAPES}")
        self.prefetch = celery_app.DEFAULT_PREFETCH if prefetch is None else prefetch
        self.url = f"{target.url}/{REDIS_DBS['celery']}"
        self.app = celery_app.make_app(self.url, self.prefetch)
        self.client = redis.Redis.from_url(self.url, socket_timeout=10)
        self.shape_name = shape
        self.nodes = 0
        self.broker = _redis_broker(target, REDIS_DBS["celery"])
        self.durability = (
            f"{target.durability}. acks_late: a task stays in the `unacked` hash until it ran;"
            " a killed worker's is redelivered after the visibility timeout (1 h)"
        )
        self.shape = ""

    def reset(self) -> None:
        _claim_db(self.client, f"Redis database {REDIS_DBS['celery']}")

    def env(self) -> dict[str, str]:
        from bench.jobs_peer_tasks.celery_app import PREFETCH_ENV

        return {REDIS_URL_ENV: self.url, PREFETCH_ENV: str(self.prefetch)}

    def commands(self, workers: int) -> list[list[str]]:
        base = [sys.executable, "-m", "celery", "-A", "bench.jobs_peer_tasks.celery_app"]
        base += ["worker", "-Q", QUEUE, "-l", "WARNING"]
        base += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        flags = f"--without-gossip --without-mingle --without-heartbeat, prefetch {self.prefetch}"
        if self.shape_name == "prefork":
            self.nodes = 1
            self.shape = f"1 `celery worker -P prefork -c {workers}` ({flags})"
            return [[*base, "-P", "prefork", "-c", str(workers), "-n", "bench0@%h"]]
        pool, conc = ("solo", []) if self.shape_name == "solo" else ("prefork", ["-c", "1"])
        self.nodes = workers
        self.shape = f"{workers} x `celery worker -P {pool} {' '.join(conc)}` ({flags})"
        return [[*base, "-P", pool, *conc, "-n", f"bench{i}@%h"] for i in range(workers)]

    def ready(self, workers: int) -> bool:
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

    def __init__(self, target: RedisTarget, threads: int) -> None:
        import redis

        from bench.jobs_peer_tasks import dramatiq_app

        self.url = f"{target.url}/{REDIS_DBS['dramatiq']}"
        self.broker_obj = dramatiq_app.make_broker(self.url)
        self.actor = dramatiq_app.declare(self.broker_obj)
        self.client = redis.Redis.from_url(self.url, socket_timeout=10)
        self.ns = dramatiq_app.NAMESPACE
        self.threads = threads
        self.broker = _redis_broker(target, REDIS_DBS["dramatiq"])
        self.durability = (
            f"{target.durability}. Acked after the task ran; a dead worker's unacked"
            " messages are requeued once its heartbeat expires"
        )
        self.shape = ""

    def reset(self) -> None:
        _claim_db(self.client, f"Redis database {REDIS_DBS['dramatiq']}")

    def env(self) -> dict[str, str]:
        return {REDIS_URL_ENV: self.url}

    def commands(self, workers: int) -> list[list[str]]:
        self.shape = (
            f"1 `dramatiq --processes {workers} --threads {self.threads}` (prefetch 2 x threads)"
        )
        argv = [sys.executable, "-m", "dramatiq", "bench.jobs_peer_tasks.dramatiq_app"]
        return [[*argv, "--processes", str(workers), "--threads", str(self.threads), "-Q", QUEUE]]

    def ready(self, workers: int) -> bool:
        # Every worker process's consumer stamps its broker id into the heartbeat set on each
        # fetch; the parent has not fetched or enqueued yet.
        return int(self.client.zcard(f"{self.ns}:__heartbeats__")) >= workers

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
    def __init__(self, target: RedisTarget, simple: bool) -> None:
        import redis
        from rq import Queue

        self.url = f"{target.url}/{REDIS_DBS['rq']}"
        self.client = redis.Redis.from_url(self.url, socket_timeout=10)
        self.queue = Queue(QUEUE, connection=self.client)
        self.simple = simple
        self.peer = "rq SimpleWorker" if simple else "rq"
        self.broker = _redis_broker(target, REDIS_DBS["rq"])
        self.durability = (
            f"{target.durability}. A job runs once: a dead worker's job goes to the failed"
            " registry, not back to the queue"
        )
        kind = "SimpleWorker: runs the job in the worker" if simple else "Worker: forks per job"
        self.shape = f"{{}} x `rq worker` ({kind}; task module preloaded with `-c`)"

    def reset(self) -> None:
        _claim_db(self.client, f"Redis database {REDIS_DBS['rq']}")

    def env(self) -> dict[str, str]:
        return {REDIS_URL_ENV: self.url}

    def commands(self, workers: int) -> list[list[str]]:
        self.shape = self.shape.format(workers)
        argv = [sys.executable, "-m", "rq.cli", "worker", "-c", "bench.jobs_peer_tasks.rq_tasks"]
        argv += ["--logging_level", "WARNING"]
        if self.simple:
            argv += ["-w", "rq.worker.SimpleWorker"]
        return [[*argv, "-n", f"bench-{i}", QUEUE] for i in range(workers)]

    def ready(self, workers: int) -> bool:
        from rq import Worker

        found = Worker.all(queue=self.queue)
        return len(found) >= workers and all(w.get_state() == "idle" for w in found)

    def enqueue(self, n: int) -> None:
        from rq import Queue

        func = "bench.jobs_peer_tasks.rq_tasks.noop"
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

    def __init__(self, concurrency: int) -> None:
        self.dsn = _pg_dsn(PROCRASTINATE_DB)
        self.concurrency = concurrency
        self.conn: Any = None
        self.broker = f"PostgreSQL 127.0.0.1:5432, database {PROCRASTINATE_DB}"
        self.durability = "PostgreSQL"
        self.shape = ""

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(PG_CONNINFO, autocommit=True, connect_timeout=10) as admin:
            admin.execute(sql)

    def reset(self) -> None:
        import psycopg

        from bench.jobs_peer_tasks.procrastinate_app import make_app

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

    def commands(self, workers: int) -> list[list[str]]:
        self.shape = (
            f"{workers} x `procrastinate worker --concurrency {self.concurrency}`"
            " (LISTEN/NOTIFY on; async no-op task; jobs kept as `succeeded`)"
        )
        argv = [sys.executable, "-m", "procrastinate", "--app"]
        argv += ["bench.jobs_peer_tasks.procrastinate_app.app", "worker", "--queues", QUEUE]
        argv += ["--concurrency", str(self.concurrency)]
        return [[*argv, "--name", f"bench-{i}"] for i in range(workers)]

    def _count(self, sql: str) -> int:
        row = self.conn.execute(sql).fetchone()
        return int(row[0])

    def ready(self, workers: int) -> bool:
        return self._count("SELECT count(*) FROM procrastinate_workers") >= workers

    def enqueue(self, n: int) -> None:
        task = self.app.tasks["noop"]
        for start in range(0, n, BULK):
            task.batch_defer(*([{}] * min(BULK, n - start)))  # one INSERT per batch

    def remaining(self, total: int) -> int:
        # The partial index on status IN ('todo', 'doing') keeps this cheap.
        return self._count(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        )

    def verify(self, total: int) -> str:
        done = self._count("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
        every = self._count("SELECT count(*) FROM procrastinate_jobs")
        return "" if done == every == total else f"{done} succeeded of {every} jobs"

    def cleanup(self) -> None:
        if self.conn is not None:
            self.conn.close()
        with contextlib.suppress(Exception):
            self.app.close()
        self._admin(f"DROP DATABASE IF EXISTS {PROCRASTINATE_DB} WITH (FORCE)")


# ------------------------------------------------------------------------------ measurement


def _wait(
    what: str, done: Callable[[], bool], timeout: float, procs: Sequence[subprocess.Popen[bytes]]
) -> float:
    """Poll until ``done()`` holds on two polls in a row; returns when it first held.

    The second poll guards against a task caught between two broker structures (popped from
    the list, not yet in the unacknowledged set) looking like nothing left.
    """
    deadline = time.perf_counter() + timeout
    first: float | None = None
    while True:
        now = time.perf_counter()
        if done():
            if first is not None:
                return first
            first = now
        else:
            first = None
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise _Failed(f"{what}: a worker exited with code {dead[0].returncode}")
        if now > deadline:
            raise _Failed(f"{what}: not done after {timeout:g} s")
        time.sleep(POLL)


def _measure(driver: _Driver, n: int, workers: int, timeout: float) -> PeerResult:
    procs: list[subprocess.Popen[bytes]] = []
    seconds = enqueue_seconds = None
    left: int | None = None
    status = "ok"
    with tempfile.TemporaryDirectory(prefix=f"sluice-bench-{driver.peer.replace(' ', '-')}-") as t:
        logs: list[Path] = []
        try:
            driver.reset()
            env = {**os.environ, **driver.env()}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
            for i, argv in enumerate(driver.commands(workers)):
                logs.append(Path(t) / f"worker-{i}.log")
                procs.append(_start(argv, env, logs[-1]))
            _wait("workers ready", lambda: driver.ready(workers), READY_TIMEOUT, procs)
            warm = WARMUP_PER_WORKER * workers
            driver.enqueue(warm)
            _wait("warm-up", lambda: driver.remaining(warm) == 0, 30.0, procs)
            total = warm + n
            t0 = time.perf_counter()
            driver.enqueue(n)
            enqueue_seconds = time.perf_counter() - t0
            left = driver.remaining(total)
            t_done = _wait("tasks", lambda: driver.remaining(total) == 0, timeout, procs)
            seconds = max(t_done - t0, enqueue_seconds)
            problem = driver.verify(total)
            if problem:
                status = f"check failed: {problem}"
        except Exception as exc:  # one failing peer is reported, the others still run
            status = one_line(exc)
            tail = _tail(logs)
            if tail:
                status += f" [worker log: ...{tail[-300:]}]"
        finally:
            _stop(procs)
            with contextlib.suppress(Exception):
                driver.cleanup()
    ok = status == "ok" and seconds is not None
    return PeerResult(
        peer=driver.peer,
        broker=driver.broker,
        durability=driver.durability,
        workers=driver.shape,
        n=n,
        seconds=seconds if ok else None,
        tasks_per_s=n / seconds if ok and seconds else None,
        enqueue_seconds=enqueue_seconds,
        left_after_enqueue=left,
        status=status,
    )


def _failed(peer: str, broker: str, n: int, exc: BaseException) -> PeerResult:
    return PeerResult(peer, broker, "-", "-", n, None, None, None, None, one_line(exc))


def _shared() -> RedisTarget:
    return redis_target(SHARED_REDIS_URL, "shared")


def run_celery(
    n: int = DEFAULT_N,
    workers: int = DEFAULT_WORKERS,
    *,
    target: RedisTarget | None = None,
    shape: str = "solo",
    prefetch: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> PeerResult:
    """Celery on Redis: ``shape`` is one of ``CELERY_SHAPES``; prefetch None = Celery's (4)."""
    try:
        driver = _Celery(target or _shared(), shape, prefetch)
    except Exception as exc:
        return _failed("celery", "Redis", n, exc)
    return _measure(driver, n, workers, timeout)


def run_dramatiq(
    n: int = DEFAULT_N,
    workers: int = DEFAULT_WORKERS,
    *,
    target: RedisTarget | None = None,
    threads: int = 1,
    timeout: float = DEFAULT_TIMEOUT,
) -> PeerResult:
    """Dramatiq on Redis: one ``dramatiq`` command with ``workers`` processes."""
    try:
        driver = _Dramatiq(target or _shared(), threads)
    except Exception as exc:
        return _failed("dramatiq", "Redis", n, exc)
    return _measure(driver, n, workers, timeout)


def run_rq(
    n: int = DEFAULT_N,
    workers: int = DEFAULT_WORKERS,
    *,
    target: RedisTarget | None = None,
    simple: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> PeerResult:
    """RQ on Redis: ``workers`` ``rq worker`` processes, forking per job unless ``simple``."""
    try:
        driver = _Rq(target or _shared(), simple)
    except Exception as exc:
        return _failed("rq SimpleWorker" if simple else "rq", "Redis", n, exc)
    return _measure(driver, n, workers, timeout)


def run_procrastinate(
    n: int = DEFAULT_N,
    workers: int = DEFAULT_WORKERS,
    *,
    concurrency: int = 1,
    timeout: float = DEFAULT_TIMEOUT,
) -> PeerResult:
    """procrastinate on PostgreSQL: ``workers`` worker processes, in a database of its own."""
    return _measure(_Procrastinate(concurrency), n, workers, timeout)


def _redis_peers(n: int, workers: int, target: RedisTarget) -> list[PeerResult]:
    return [
        run_celery(n, workers, target=target),
        run_dramatiq(n, workers, target=target),
        run_rq(n, workers, target=target),
        run_rq(n, workers, target=target, simple=True),
    ]


def run_peers(n: int = DEFAULT_N, workers: int = DEFAULT_WORKERS) -> list[PeerResult]:
    """Every peer once per durability: Redis peers on the shared (no persistence) Redis and on
    a private ``appendfsync always`` one, then procrastinate on PostgreSQL."""
    results: list[PeerResult] = []
    try:
        results += _redis_peers(n, workers, _shared())
    except Exception as exc:
        results.append(_failed("Redis peers", f"shared Redis {SHARED_REDIS_URL}", n, exc))
    try:
        with private_redis("always") as url:
            results += _redis_peers(n, workers, redis_target(url, "private"))
    except Exception as exc:
        results.append(_failed("Redis peers", "private redis-server", n, exc))
    results.append(run_procrastinate(n, workers))
    return results


# ------------------------------------------------------------------------------ report


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _redis_facts() -> list[tuple[str, str]]:
    try:
        shared = _shared()
    except Exception as exc:
        return [("Redis", f"unreachable at {SHARED_REDIS_URL}: {one_line(exc)}")]
    return [("Redis", f"{shared.version} at {SHARED_REDIS_URL}: {shared.durability}")]


def render(results: Sequence[PeerResult], n: int, workers: int) -> str:
    """The Markdown report: machine and servers, workload, one row per peer and durability."""
    facts = host_facts() + _redis_facts() + pg_facts()
    facts.append(("Packages", package_versions(_DISTRIBUTIONS)))
    out = ["# Worker throughput of Python peers, no-op tasks", "", "| | |", "|---|---|"]
    out += [f"| {key} | {value} |" for key, value in facts]
    out += [
        "",
        f"{workers} worker processes per peer, started against an empty queue and warmed up"
        f" with {WARMUP_PER_WORKER * workers} tasks; then N = {n:,} no-op tasks enqueued in"
        " the peer's bulk way. seconds = first enqueue to last task done, as the broker"
        f" counts it (polled every {POLL * 1000:g} ms); tasks/s = N / seconds; enqueue s = how"
        " long the enqueue took (workers already consuming); left = tasks not done when the"
        " enqueue returned.",
        "",
        "| peer | broker | tasks/s | seconds | enqueue s | left | status |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        left = "-" if r.left_after_enqueue is None else f"{r.left_after_enqueue:,}"
        out.append(
            f"| {r.peer} | {r.broker} | {_fmt(r.tasks_per_s, ',.0f')} | {_fmt(r.seconds, '.2f')}"
            f" | {_fmt(r.enqueue_seconds, '.2f')} | {left} | {r.status} |"
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
        prog="python -m bench.jobs_peers",
        description="Worker throughput of Celery, Dramatiq, RQ and procrastinate (no-op tasks).",
    )
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="tasks per peer run")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="worker processes")
    args = parser.parse_args(argv)
    results = run_peers(args.n, args.workers)
    print(render(results, args.n, args.workers))
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
