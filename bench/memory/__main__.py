"""Resident memory of a worker draining a 1,000,000-task backlog and of a Spark stream reading one.

``python -m bench memory [--n N] [--only worker-sqlite,worker-postgresql,spark]``: for each
case the backlog is made first (tasks submitted, or messages enqueued, in transactions of
10,000), then one process drains it at the default settings while this one samples its
resident set (``VmRSS`` of it and, for Spark, of every process it started: the JVM and
Spark's Python workers) every 0.2 s. The drained process reports its own peak (``VmHWM``)
too. Writes ``bench/results/memory-DATE.md`` with the bounds that tests/reliability/
test_memory.py asserts.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import sluice
from bench.harness import PG_CONNINFO, add_common_options, host_facts, pg_facts, report_path
from bench.memory import SPARK_BOUND_MB, WORKER_BOUND_MB
from bench.memory.probe import resident_mb, tree_mb

__all__ = ["main"]

_CHUNK = 10_000
_PG_URL = f"{PG_CONNINFO}?schema=bench_memory"


@dataclass
class Outcome:
    case: str
    n: int
    fill_seconds: float
    drain_seconds: float
    start_mb: float
    peak_mb: float
    own_peak_mb: float
    bound_mb: int

    @property
    def status(self) -> str:
        return "PASS" if self.peak_mb < self.bound_mb else "MISS"


def _sample(proc: subprocess.Popen[str], whole_tree: bool, peaks: list[float]) -> None:
    while proc.poll() is None:
        peaks.append(tree_mb(proc.pid) if whole_tree else resident_mb(proc.pid))
        time.sleep(0.2)  # a sampler of another process: nothing to wait on


def _drain(args: list[str], whole_tree: bool) -> tuple[float, float, float, dict[str, object]]:
    """Run a child to the end: (seconds, MB when it was ready, peak MB seen, its report)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.memory.probe", *args], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline())
    start_mb = float(ready["rss_mb"])
    peaks: list[float] = [start_mb]
    sampler = threading.Thread(target=_sample, args=(proc, whole_tree, peaks))
    begun = time.perf_counter()
    sampler.start()
    line = proc.stdout.readline()
    seconds = time.perf_counter() - begun
    proc.wait()
    sampler.join()
    proc.stdout.close()
    if not line:
        raise RuntimeError(f"the drained process ended early ({proc.returncode})")
    return seconds, start_mb, max(peaks), json.loads(line)


def fill_tasks(url: str, n: int) -> float:
    """``n`` no-op tasks submitted in transactions of 10,000; the seconds it took."""
    begun = time.perf_counter()
    with sluice.connect(url) as db:
        db.jobs.define("noop")
        for start in range(0, n, _CHUNK):
            db.jobs.submit_tasks("noop", list(range(start, min(n, start + _CHUNK))))
    return time.perf_counter() - begun


def fill_queue(url: str, queue: str, n: int) -> float:
    """``n`` small JSON messages enqueued in transactions of 10,000; the seconds it took."""
    begun = time.perf_counter()
    with sluice.connect(url) as db:
        db.create_queue(queue, exist_ok=True)
        for start in range(0, n, _CHUNK):
            db.queue(queue).put_many(
                [{"n": i, "kind": "order"} for i in range(start, min(n, start + _CHUNK))]
            )
    return time.perf_counter() - begun


def _worker_case(name: str, url: str, n: int) -> Outcome:
    fill = fill_tasks(url, n)
    seconds, start, peak, report = _drain(["worker", url], whole_tree=False)
    if report["ran"] != n:
        raise RuntimeError(f"{name}: the worker ran {report['ran']} of {n} tasks")
    own = float(str(report["own_peak_mb"]))
    return Outcome(name, n, fill, seconds, start, max(peak, own), own, WORKER_BOUND_MB)


def _spark_case(url: str, n: int, tmp: Path) -> Outcome:
    fill = fill_queue(url, "feed", n)
    args = ["spark", url, "feed", str(tmp / "checkpoint")]
    seconds, start, peak, report = _drain(args, whole_tree=True)
    with sluice.connect(url) as db:
        left = len(db.queue("feed"))
    if left:
        raise RuntimeError(f"spark: {left} of {n} messages left in the queue")
    own = float(str(report["own_peak_mb"]))
    return Outcome("spark stream (PostgreSQL)", n, fill, seconds, start, peak, own, SPARK_BOUND_MB)


def _drop_schema() -> None:
    import psycopg

    with psycopg.connect(PG_CONNINFO, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS bench_memory CASCADE")


def run(n: int, only: set[str]) -> list[Outcome]:
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp:
        if "worker-sqlite" in only:
            outcomes.append(_worker_case("worker (SQLite)", f"sqlite:///{tmp}/memory.db", n))
        for case in ("worker-postgresql", "spark"):
            if case not in only:
                continue
            _drop_schema()
            try:
                if case == "spark":
                    outcomes.append(_spark_case(_PG_URL, n, Path(tmp)))
                else:
                    outcomes.append(_worker_case("worker (PostgreSQL)", _PG_URL, n))
            finally:
                _drop_schema()
    return outcomes


def render(outcomes: list[Outcome]) -> str:
    facts = host_facts() + pg_facts()
    out = ["# Resident memory draining a backlog", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in facts]
    out += [
        "",
        "The backlog is made first (no-op tasks with `db.jobs.submit_tasks`, or 2-field JSON"
        " messages with `put_many`, 10,000 per transaction); then one process drains it:"
        " a worker (`db.worker()`, default settings: adaptive batches, durable commits) or a"
        " Spark stream (local[2], `readStream.format('sluice')` exclusive, default micro-"
        "batches of 10,000, written to Spark's `noop` sink, trigger availableNow). Resident"
        " size sampled every 0.2 s (Spark: the driver, its JVM and Python workers summed) and"
        " the process's own `VmHWM`; peak = the larger.",
        "",
        "| case | backlog | fill s | drain s | per s | resident when ready MB | peak MB"
        " | own VmHWM MB | bound MB | status |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for o in outcomes:
        out.append(
            f"| {o.case} | {o.n:,} | {o.fill_seconds:.1f} | {o.drain_seconds:.1f}"
            f" | {o.n / o.drain_seconds:,.0f} | {o.start_mb:.0f} | {o.peak_mb:.0f}"
            f" | {o.own_peak_mb:.0f} | {o.bound_mb:,} | {o.status} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000, help="backlog size")
    parser.add_argument(
        "--only", default="worker-sqlite,worker-postgresql,spark", help="cases, comma-separated"
    )
    add_common_options(parser, quick="a smoke run: a backlog of 2,000, workers only")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.only = 2_000, "worker-sqlite,worker-postgresql"
    outcomes = run(args.n, set(args.only.split(",")))
    text = render(outcomes)
    path = report_path("memory", args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text)
    print(f"written to {path}")
    return 0 if all(o.status == "PASS" for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
