"""Threads sharing one SQLite Database: what handing work across CPUs costs them.

Run: ``python -m bench threads``. T threads (1, 2, 10) each drain a queue of their own,
one message per transaction (a claim, then the commit that acknowledges it), through one
shared ``sluice.connect(...)``; beside them raw sqlite3 does the same work with one
connection behind a lock (claim = UPDATE ... RETURNING, ack = DELETE, each in autocommit).
Every run is a fresh process and a fresh file, once free to use every CPU and once pinned
to one (``os.sched_setaffinity``, as ``taskset -c 0`` would). Reported: deliveries/s, the
process's CPU time per delivery (user + system) and its voluntary context switches per
delivery. Writes ``bench/results/threads-<date>.md``.

Why: threads of one Python process take turns on the GIL, and sluice's SQLite backend on
its one connection. Each turn that moves the work to a thread sleeping on the other CPU
wakes that CPU; on this project's virtual machine that costs far more than a switch on
the same CPU, and the more Python a thread runs between two turns, the more of it runs
with cold caches.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import os
import resource
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cycle.matrix import PACKAGES
from bench.harness import add_common_options, facts_table, machine_facts, write_report

THREADS = (1, 2, 10)
SYSTEMS = ("sluice", "raw")
_BODY = {"order": 1, "customer": "Smith", "items": [1, 2, 3], "note": "x" * 48}


@dataclass(frozen=True)
class Sample:
    rate: float  # deliveries/s
    cpu_us: float  # process CPU per delivery, user + system
    switches: float  # voluntary context switches per delivery


_Drain = tuple[list[threading.Thread], Callable[[], None]]
"""The threads that drain, and what closes their database once they are done."""


def _drain_sluice(path: Path, threads: int, each: int, synchronous: str) -> _Drain:
    import sluice

    db = sluice.connect(f"sqlite:///{path / 's.db'}", synchronous=synchronous)  # type: ignore[arg-type]
    names = [f"q{i}" for i in range(threads)]
    for name in names:
        db.create_queue(name).put_many([_BODY] * each)

    def drain(name: str) -> None:
        while True:
            with db.transaction() as tx:
                if not tx.dequeue(name, limit=1):
                    return

    return [threading.Thread(target=drain, args=(n,)) for n in names], db.close


def _drain_raw(path: Path, threads: int, each: int, synchronous: str) -> _Drain:
    conn = sqlite3.connect(path / "raw.db", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, queue INT, body BLOB, state INT)")
    conn.execute("CREATE INDEX q_ready ON q (queue, state, id)")
    body = repr(_BODY).encode()
    for t in range(threads):
        conn.executemany("INSERT INTO q (queue, body, state) VALUES (?, ?, 0)", [(t, body)] * each)
    lock = threading.Lock()
    claim = (
        "UPDATE q SET state = 1 WHERE id = (SELECT id FROM q WHERE queue = ? AND state = 0"
        " ORDER BY id LIMIT 1) RETURNING id, body"
    )

    def drain(queue: int) -> None:
        while True:
            with lock:
                rows = conn.execute(claim, (queue,)).fetchall()
            if not rows:
                return
            with lock:
                conn.execute("DELETE FROM q WHERE id = ?", (rows[0][0],))

    return [threading.Thread(target=drain, args=(t,)) for t in range(threads)], conn.close


def _child(  # noqa: PLR0917 (a spawned process's target takes its arguments by position)
    system: str, threads: int, total: int, synchronous: str, pin: bool, out: Any
) -> None:
    if pin:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    each = total // threads
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        make = _drain_sluice if system == "sluice" else _drain_raw
        workers, close = make(Path(tmp), threads, each, synchronous)
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        close()
    n = each * threads
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out.send(Sample(n / seconds, cpu / n * 1e6, (after.ru_nvcsw - before.ru_nvcsw) / n))


def _run(system: str, threads: int, total: int, synchronous: str, pin: bool) -> Sample:
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(system, threads, total, synchronous, pin, there))
    proc.start()
    there.close()
    if not here.poll(600):
        proc.kill()
        raise RuntimeError(f"{system}, {threads} threads: no result in 600 s")
    sample: Sample = here.recv()
    proc.join()
    return sample


def _median(samples: list[Sample]) -> Sample:
    return sorted(samples, key=lambda s: s.rate)[len(samples) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench threads", description=__doc__)
    parser.add_argument("--total", type=int, default=6000, help="deliveries per run")
    add_common_options(
        parser,
        quick="a smoke run: 300 deliveries, 1 repeat",
        repeats=3,
        repeats_help="runs per cell (median by rate)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.total, args.repeats = 300, 1
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        print("needs Linux and at least 2 CPUs to compare pinned and free", file=sys.stderr)
        return 2
    tmp_root = Path(tempfile.gettempdir())
    cells: dict[tuple[str, str, int, bool], list[Sample]] = {}
    for synchronous in ("NORMAL", "FULL"):
        for threads in THREADS:
            for _ in range(args.repeats):
                for system in SYSTEMS:  # interleaved, so drift hits all alike
                    for pin in (False, True):
                        key = (synchronous, system, threads, pin)
                        sample = _run(system, threads, args.total, synchronous, pin)
                        cells.setdefault(key, []).append(sample)
            print(f"{synchronous}, {threads} threads: done", file=sys.stderr, flush=True)
    lines = [f"# Threads sharing one SQLite Database, {dt.date.today().isoformat()}", ""]
    lines += facts_table(machine_facts(tmp_root, PACKAGES))
    lines += [
        "",
        f"Each thread drains its own queue of {args.total:,} / threads messages, one per"
        " transaction (claim, then the acknowledging commit); one process per run, free to use"
        " every CPU or pinned to one. Median of"
        f" {args.repeats} runs by rate. cpu = the process's user + system time per delivery;"
        " switches = voluntary context switches per delivery. sluice claims without an fsync"
        " and acknowledges at the level shown; raw runs both statements at that level.",
    ]
    for synchronous in ("NORMAL", "FULL"):
        lines += [
            "",
            f"## synchronous={synchronous}",
            "",
            "| system | threads | free: deliveries/s | cpu µs | switches"
            " | pinned: deliveries/s | cpu µs | switches | pinned / free |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for system in SYSTEMS:
            for threads in THREADS:
                free = _median(cells[(synchronous, system, threads, False)])
                pinned = _median(cells[(synchronous, system, threads, True)])
                lines.append(
                    f"| {system} | {threads} | {free.rate:,.0f} | {free.cpu_us:.0f}"
                    f" | {free.switches:.1f} | {pinned.rate:,.0f} | {pinned.cpu_us:.0f}"
                    f" | {pinned.switches:.1f} | {pinned.rate / free.rate:.2f} |"
                )
    write_report("threads", "\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
