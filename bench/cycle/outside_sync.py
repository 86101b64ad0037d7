"""A design probe: what syncing the WAL outside the connection lock would buy threads.

Run: ``python -m bench outside-sync``. Raw sqlite3, one connection behind a lock as
sluice's SQLite backend has, WAL mode; T threads (1, 2, 10) each drain a table's rows of
their own, one per transaction: a claim (UPDATE ... RETURNING) committed without an fsync,
then an acknowledgement (DELETE) that must be durable. Two ways to make it durable:

- **inside**: the DELETE commits at synchronous=FULL, so SQLite fsyncs the WAL while the
  lock is held, as sluice does today. Nobody else can claim or commit meanwhile.
- **outside**: the DELETE commits at NORMAL (its WAL frames written, not synced), the lock
  is released, then the thread fdatasyncs the WAL file itself, unless a sync that started
  after its commit already covered it (the WAL is written in order, so one sync covers
  every commit before it: group commit without anyone waiting to be grouped).

Not what sluice does: under ``outside`` another thread, or another process, can read a
commit before it is durable, and a power cut in that window undoes a message someone
already took. Writes ``bench/results/outside-sync-<date>.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.cycle.matrix import PACKAGES
from bench.harness import add_common_options, facts_table, machine_facts, write_report

THREADS = (1, 2, 10)
MODES = ("inside", "outside")
_CLAIM = (
    "UPDATE q SET state = 1 WHERE id = (SELECT id FROM q WHERE queue = ? AND state = 0"
    " ORDER BY id LIMIT 1) RETURNING id, body"
)


class _Synced:
    """Commits written and commits durable, counted; one fdatasync at a time."""

    def __init__(self, wal: int) -> None:
        self.wal = wal
        self.written = 0  # under the connection lock
        self.synced = 0
        self.lock = threading.Lock()

    def wait_for(self, mine: int) -> None:
        if self.synced >= mine:
            return
        with self.lock:
            if self.synced >= mine:  # a sync that started after this commit covered it
                return
            target = self.written
            os.fdatasync(self.wal)
            self.synced = target


def run(path: Path, threads: int, total: int, mode: str) -> float:
    """Drain ``total`` rows from ``threads`` threads; deliveries/s."""
    each = total // threads
    conn = sqlite3.connect(path / "q.db", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, queue INT, body BLOB, state INT)")
    conn.execute("CREATE INDEX q_ready ON q (queue, state, id)")
    for t in range(threads):
        rows = [(t, b"x" * 100)] * each
        conn.executemany("INSERT INTO q (queue, body, state) VALUES (?, ?, 0)", rows)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = os.open(path / "q.db-wal", os.O_RDONLY)
    lock = threading.Lock()
    synced = _Synced(wal)

    def acknowledge(ref: int) -> None:
        if mode == "inside":
            with lock:
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("DELETE FROM q WHERE id = ?", (ref,))
                conn.execute("PRAGMA synchronous=NORMAL")
            return
        with lock:
            conn.execute("DELETE FROM q WHERE id = ?", (ref,))
            synced.written += 1
            mine = synced.written
        synced.wait_for(mine)

    def drain(queue: int) -> None:
        while True:
            with lock:
                rows = conn.execute(_CLAIM, (queue,)).fetchall()
            if not rows:
                return
            acknowledge(rows[0][0])

    workers = [threading.Thread(target=drain, args=(t,)) for t in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - start
    left = conn.execute("SELECT count(*) FROM q").fetchone()[0]
    os.close(wal)
    conn.close()
    if left:
        raise RuntimeError(f"{mode}: {left} rows left")
    return each * threads / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench outside-sync", description=__doc__)
    parser.add_argument("--total", type=int, default=6000, help="deliveries per run")
    add_common_options(
        parser, quick="a smoke run: 300 deliveries, 1 repeat", repeats=3, tmp_dir=None
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.total, args.repeats = 300, 1
    tmp_root: Path = args.tmp_dir or Path(tempfile.gettempdir())
    rates: dict[tuple[str, int], list[float]] = {}
    for threads in THREADS:
        for _ in range(args.repeats):
            for mode in MODES:  # interleaved, so drift hits both alike
                with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
                    rates.setdefault((mode, threads), []).append(
                        run(Path(tmp), threads, args.total, mode)
                    )
    median = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
    lines = [f"# Syncing the WAL inside or outside the lock, {dt.date.today().isoformat()}", ""]
    lines += facts_table(machine_facts(tmp_root, PACKAGES))
    lines += [
        "",
        f"{args.total:,} deliveries per run over the threads, one per transaction (claim at"
        f" NORMAL, durable acknowledgement); deliveries/s, median of {args.repeats} runs.",
        "",
        "| threads | inside (fsync under the lock) | outside (fdatasync after it)"
        " | outside / inside |",
        "|---:|---:|---:|---:|",
    ]
    for t in THREADS:
        inside, outside = median[("inside", t)], median[("outside", t)]
        lines.append(f"| {t} | {inside:,.0f} | {outside:,.0f} | {outside / inside:.2f} |")
    write_report("outside-sync", "\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
