"""Concurrent producers at synchronous FULL: what group commit buys, against raw SQLite.

Run: ``python -m bench concurrent``. Eight threads each enqueue messages one per
transaction into one SQLite file. raw = each thread with its own connection and
a bare INSERT per transaction (every commit its own fsync); sluice with and
without group commit. Writes ``bench/results/concurrent-<date>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import sluice
from bench.cycle.matrix import PACKAGES
from bench.harness import (
    add_common_options,
    encode,
    facts_table,
    machine_facts,
    make_bodies,
    write_report,
)

THREADS = (1, 4, 8)


def _raw(path: Path, threads: int, per_thread: int) -> float:
    setup = sqlite3.connect(path / "raw.db", isolation_level=None)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, body BLOB, state INTEGER)")
    setup.execute("CREATE INDEX q_state ON q (state)")
    setup.close()
    bodies = [encode(b).encode() for b in make_bodies(per_thread)]

    def produce() -> None:
        conn = sqlite3.connect(path / "raw.db", isolation_level=None, timeout=60)
        conn.execute("PRAGMA synchronous=FULL")
        for body in bodies:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO q (body, state) VALUES (?, 0)", (body,))
            conn.execute("COMMIT")
        conn.close()

    return _timed(produce, threads)


def _sluice(group_commit: bool) -> Callable[[Path, int, int], float]:
    def run(path: Path, threads: int, per_thread: int) -> float:
        bodies = make_bodies(per_thread)
        with sluice.connect(f"sqlite:///{path / 's.db'}", group_commit=group_commit) as db:
            q = db.create_queue("bench")

            def produce() -> None:
                for body in bodies:
                    q.put(body)

            elapsed = _timed(produce, threads)
            if q.stats()["ready"] != threads * per_thread:
                raise RuntimeError("sluice lost or doubled messages")
        return elapsed

    return run


def _timed(work: Callable[[], None], threads: int) -> float:
    workers = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - start


CONTENDERS: dict[str, Callable[[Path, int, int], float]] = {
    "raw (connection per thread)": _raw,
    "sluice, group commit": _sluice(True),
    "sluice, no group commit": _sluice(False),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench concurrent", description=__doc__)
    parser.add_argument(
        "--total", type=int, default=1600, help="messages per run, over all threads"
    )
    add_common_options(
        parser,
        quick="a smoke run: 1 repeat (each thread still enqueues 50 or more)",
        repeats=3,
        repeats_help="runs per cell (median)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.total, args.repeats = 400, 1
    tmp_root = Path(tempfile.gettempdir())
    samples: dict[tuple[str, int], list[float]] = {}
    for threads in THREADS:
        per_thread = max(args.total // threads, 50)
        for _ in range(args.repeats):
            for name, run in CONTENDERS.items():  # interleaved, so drift hits all alike
                with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
                    seconds = run(Path(tmp), threads, per_thread)
                samples.setdefault((name, threads), []).append(threads * per_thread / seconds)
    rates = {key: statistics.median(values) for key, values in samples.items()}
    lines = [f"# Concurrent producers at synchronous FULL, {dt.date.today().isoformat()}", ""]
    lines += facts_table(machine_facts(tmp_root, PACKAGES))
    lines += [
        "",
        "Each thread enqueues its share, one message per transaction, durable (FULL) at every "
        "commit. Messages/s, median of "
        f"{args.repeats} runs; ratio against raw at the same thread count.",
        "",
        "| contender | " + " | ".join(f"{t} thread{'s' * (t > 1)}" for t in THREADS) + " |",
        "|---|" + "---:|" * len(THREADS),
    ]
    for name in CONTENDERS:
        cells = []
        for t in THREADS:
            rate, raw = rates[(name, t)], rates[("raw (connection per thread)", t)]
            cells.append(f"{rate:,.0f} ({rate / raw:.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    report = "\n".join(lines) + "\n"
    write_report("concurrent", report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
