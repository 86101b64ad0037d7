"""How long a durable commit takes on this machine, by how long the caller worked before it.

``python -m bench commit-gap``; the cycle benchmark also runs it and puts the table in its
report, so every cycle figure comes with the disk it was measured on.

One SQLite connection, WAL, ``synchronous=FULL``, one single-row INSERT per commit (its
own transaction, one fdatasync of the WAL). Before each commit the loop keeps the CPU busy
for a fixed gap (a spin, not a sleep: a library's Python between two commits is busy
time). On the Firecracker VM these figures were first taken on, a commit that follows
the previous one within about 35 microseconds returned in about 0.04 ms; one that
followed a longer gap took 0.15 to 0.45 ms: same statement, same bytes written, same
fsync count. A loop whose own work between commits stays under that gap (raw
statements, huey) pays the short latency for every fsync; one whose work exceeds it
(sluice's engine, any Python library doing more than an INSERT) pays the long one. The
ratios of the cycle benchmark at FULL depend on that, not only on fsync counts.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.harness import MEMORY_FS, facts_table, filesystem_of, machine_facts, write_report

__all__ = ["GAPS", "GapLatency", "measure", "render", "table"]

GAPS = (0, 10, 20, 30, 40, 60, 100, 200, 400)
"""Microseconds of busy work before each commit."""


@dataclass(frozen=True)
class GapLatency:
    gap_us: int
    median_ms: float
    p90_ms: float


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def measure(
    directory: Path, commits: int = 1_000, gaps: tuple[int, ...] = GAPS
) -> list[GapLatency]:
    """Commit latency at each gap, in a fresh database file under ``directory``."""
    with tempfile.TemporaryDirectory(dir=directory, prefix="commit-gap-") as tmp:
        conn = sqlite3.connect(Path(tmp) / "gap.db", isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
            for _ in range(200):  # the WAL file reaches its working size first
                conn.execute("INSERT INTO t (body) VALUES (x'00')")
            out = []
            for gap in gaps:
                times = []
                for _ in range(commits):
                    _spin(gap / 1e6)
                    start = time.perf_counter()
                    conn.execute("INSERT INTO t (body) VALUES (x'00')")
                    times.append(time.perf_counter() - start)
                times.sort()
                out.append(
                    GapLatency(
                        gap, statistics.median(times) * 1e3, times[int(len(times) * 0.9)] * 1e3
                    )
                )
            return out
        finally:
            conn.close()


def table(rows: list[GapLatency]) -> list[str]:
    lines = [
        "| busy work before the commit (µs) | commit, median (ms) | commit, p90 (ms) |",
        "|---:|---:|---:|",
    ]
    lines += [f"| {r.gap_us} | {r.median_ms:.3f} | {r.p90_ms:.3f} |" for r in rows]
    return lines


def render(rows: list[GapLatency], facts: list[tuple[str, str]], commits: int) -> str:
    out = [f"# Durable commit latency by the work before it, {facts[0][1][:10]}", ""]
    out += facts_table(facts)
    out += ["", (__doc__ or "").split("\n\n", 2)[2].replace("\n", " ").strip(), ""]
    out += [f"{commits:,} commits per row, in this order, one run.", ""]
    out += table(rows)
    out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench commit-gap", description=__doc__)
    parser.add_argument("--commits", type=int, default=1_000, help="commits per gap")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 30 commits per gap")
    parser.add_argument("--tmp-dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--out", type=Path, help="report path (default: bench/results/...)")
    args = parser.parse_args(argv)
    if args.quick:
        args.commits = 30
    if args.commits < 10:
        parser.error("--commits must be at least 10")
    if filesystem_of(args.tmp_dir.resolve())[2] in MEMORY_FS:
        print(f"{args.tmp_dir} is in memory: fsync costs nothing there", file=sys.stderr)
        return 2
    rows = measure(args.tmp_dir.resolve(), args.commits)
    report = render(rows, machine_facts(args.tmp_dir.resolve(), ()), args.commits)
    write_report("commit-gap", report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
