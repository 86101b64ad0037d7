"""The sluice side of the worker-throughput benchmark: no-op tasks through worker processes.

``python -m bench.jobs.sluice URL THREADS BATCH`` is one worker process: it says
"ready" on stdout, then runs a ``noop`` worker until SIGTERM. ``run_sluice``
starts the processes, waits until each is ready, submits the tasks in
transactions of 1,000 and times until the last is done.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass

import sluice
from sluice.jobs import Task

__all__ = ["SluiceResult", "run_sluice"]

_TIMEOUT = 300.0
_BULK = 1_000


@dataclass(frozen=True)
class SluiceResult:
    backend: str
    durability: str
    workers: str
    mode: str
    n: int
    seconds: float | None
    tasks_per_s: float | None
    enqueue_seconds: float
    status: str


def _worker(url: str, threads: int, batch: int | None) -> None:
    db = sluice.connect(url)

    @db.task("noop")
    def noop(task: Task) -> None:
        return None

    worker = db.worker(tasks=["noop"], concurrency=threads, batch=batch, grace=5.0, poll=0.2)
    print("ready", flush=True)
    sys.stdin.readline()  # "go"
    worker.run()
    db.close()


def run_sluice(
    url: str,
    durability: str,
    *,
    n: int,
    workers: int = 4,
    threads: int = 1,
    batch: int | None = None,
    mode: str = "live",
) -> SluiceResult:
    """``n`` no-op tasks through ``workers`` processes of ``threads`` threads each.

    ``mode`` as the peers': ``live`` times from the first submission, the workers
    taking tasks meanwhile; ``backlog`` lets the ready workers start only once the
    tasks are submitted, and times from then. (Not SIGSTOP, as for the peers: a
    process stopped inside a SQLite write transaction would lock the file.)
    """
    backend = url.split(":", 1)[0]
    settles = "default (adaptive batches)" if batch is None else f"batch {batch}"
    shape = f"{workers} processes x {threads} thread(s), {settles}"
    with sluice.connect(url) as db:
        db.jobs.define("noop")
        procs = _start(url, workers, threads, batch)
        try:
            if mode == "live":
                _go(procs)
            begun = time.perf_counter()
            for start in range(0, n, _BULK):  # as the peers: bulk calls of 1,000
                db.jobs.submit_tasks("noop", list(range(start, min(n, start + _BULK))))
            enqueued = time.perf_counter() - begun
            if mode == "backlog":
                begun = time.perf_counter()
                _go(procs)
            left = _wait_done(db.queue("tasks.noop"), begun + _TIMEOUT)
            if left:
                return SluiceResult(backend, durability, shape, mode, n, None, None, enqueued,
                                    f"timed out with {left} left")  # fmt: skip
            seconds = time.perf_counter() - begun
            return SluiceResult(
                backend, durability, shape, mode, n, seconds, n / seconds, enqueued, "ok"
            )
        finally:
            _stop(procs)


def _start(url: str, workers: int, threads: int, batch: int | None) -> list[subprocess.Popen[str]]:
    """Worker processes, each ready (connected, task registered) when this returns."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.jobs.sluice", url, str(threads), str(batch or "")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    for proc in procs:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            _stop(procs)
            raise RuntimeError(f"a worker process ended early ({proc.wait()})")
    return procs


def _go(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def _wait_done(queue: sluice.Queue, give_up: float) -> int:
    """0 once no task is left, else how many were left at ``give_up``."""
    while True:
        stats = queue.stats()
        left = stats["ready"] + stats["claimed"] + stats["delayed"]
        if left == 0 or time.perf_counter() > give_up:
            return left
        time.sleep(0.02)  # another process's progress: looked at, not signalled


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if sys.argv[3] else None)
