"""sluice's Python per message on SQLite: CPU time per message, sluice against its schema's floor.

The cycle benchmark's wall-clock ratios at FULL move with the disk (an fsync here took from
0.1 ms to several ms from one night to the next), and what they leave of sluice's own work
is a few microseconds a message under that noise. This counts it directly: the process's CPU
time (``time.process_time``: Python and SQLite alike, nothing spent waiting) per message,
phase by phase, at ``synchronous=NORMAL`` so that no commit waits for a disk. The floor is
``raw-schema``'s statements on sluice's own table (bench.cycle.raw_schema: the same INSERT,
claim and DELETE, no sluice Python); sluice is its public API as the cycle drives it. The
difference is what sluice's Python adds to each message: building and checking envelopes,
Messages, plans and commits. Contenders alternate within each round; the figure is the
median of the rounds.

    python -m bench python-cost [--quick] [--n 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sluice
from bench.cycle.matrix import PACKAGES
from bench.cycle.raw_schema import INSERT, SLUICE
from bench.cycle.raw_sqlite import connect, drain
from bench.harness import (
    add_common_options,
    chunks,
    encode,
    facts_table,
    machine_facts,
    make_bodies,
    write_report,
)

# (enqueue, take and acknowledge): CPU microseconds per message.
Phases = tuple[float, float]

_BATCHES = (1, 100)


def _raw_schema(tmp: Path, bodies: list[dict[str, object]], batch: int) -> Phases:
    """raw-schema's statements, timed phase by phase; drained by raw_sqlite's loop."""
    db_file = tmp / "raw-schema.db"
    with sluice.connect(f"sqlite:///{db_file}") as db:
        db.create_queue("bench")
    conn = connect(db_file, "NORMAL")
    try:
        (queue,) = conn.execute("SELECT id FROM queues WHERE name = 'bench'").fetchone()
        claim = SLUICE.claim()
        tx = 0

        def take() -> list[Any]:
            nonlocal tx
            tx += 1
            now = time.time()
            return conn.execute(claim, (tx, queue, now, now, batch)).fetchall()

        start = time.process_time()
        for group in chunks(bodies, batch):
            tx += 1
            now = time.time()
            rows = [(queue, tx, i, encode(b), now, now) for i, b in enumerate(group)]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(INSERT, rows)
            conn.execute("COMMIT")
        enqueued = time.process_time()
        got = drain(conn, "messages", take)
        done = time.process_time()
    finally:
        conn.close()
    _check("raw-schema", got, len(bodies))
    return _per_message(start, enqueued, done, len(bodies))


def _sluice(tmp: Path, bodies: list[dict[str, object]], batch: int) -> Phases:
    """sluice's public API, as the cycle benchmark drives it, timed phase by phase."""
    with sluice.connect(f"sqlite:///{tmp / 'sluice.db'}", synchronous="NORMAL") as db:
        q = db.create_queue("bench")
        got = 0
        start = time.process_time()
        if batch == 1:
            for body in bodies:
                q.put(body)
            enqueued = time.process_time()
            while (m := q.get()) is not None:
                m.ack()
                got += 1
        else:
            for group in chunks(bodies, batch):
                q.put_many(group)
            enqueued = time.process_time()
            while True:
                with db.transaction() as tx:
                    taken = tx.dequeue("bench", limit=batch)
                if not taken:
                    break
                got += len(taken)
        done = time.process_time()
    _check("sluice", got, len(bodies))
    return _per_message(start, enqueued, done, len(bodies))


def _per_message(start: float, enqueued: float, done: float, n: int) -> Phases:
    return (enqueued - start) / n * 1e6, (done - enqueued) / n * 1e6


def _check(name: str, got: int, n: int) -> None:
    if got != n:
        raise RuntimeError(f"{name}: took {got} of {n} messages")


_CONTENDERS: dict[str, Callable[[Path, list[dict[str, object]], int], Phases]] = {
    "raw-schema": _raw_schema,
    "sluice": _sluice,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench python-cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--n", type=int, default=20_000, help="messages per run")
    add_common_options(parser, quick="a smoke run: 500 messages, 1 round", repeats=5)
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.repeats = 500, 1
    bodies = make_bodies(args.n)

    runs: dict[tuple[int, str], list[Phases]] = {}
    for round_ in range(args.repeats):
        for batch in _BATCHES:
            for name, run in _CONTENDERS.items():
                with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
                    phases = run(Path(tmp), bodies, batch)
                runs.setdefault((batch, name), []).append(phases)
                print(
                    f"round {round_ + 1}: batch {batch:>3} {name:<10} enqueue "
                    f"{phases[0]:6.2f} us/msg, take and acknowledge {phases[1]:6.2f} us/msg"
                )

    def median(batch: int, name: str, phase: int) -> float:
        return statistics.median(p[phase] for p in runs[(batch, name)])

    out = ["# sluice's Python per message on SQLite (CPU time)", ""]
    out += facts_table(machine_facts(Path.cwd(), PACKAGES))
    out += [
        "",
        f"CPU time of this process (Python and SQLite; no waiting) per message, WAL at "
        f"synchronous=NORMAL, N = {args.n:,} per run, median of {args.repeats} rounds with "
        "the contenders alternating. raw-schema: sluice's own table driven by raw statements "
        "(the floor of its schema); sluice: its public API (batch 1: put, get, ack; batch "
        "100: put_many, then dequeue(limit=100) in a transaction).",
        "",
        "| batch | phase | raw-schema us/msg | sluice us/msg | sluice's Python us/msg |",
        "|---:|---|---:|---:|---:|",
    ]
    for batch in _BATCHES:
        for phase, label in enumerate(("enqueue", "take and acknowledge")):
            floor, own = median(batch, "raw-schema", phase), median(batch, "sluice", phase)
            out.append(f"| {batch} | {label} | {floor:.2f} | {own:.2f} | {own - floor:.2f} |")
    write_report("python-cost", "\n".join(out) + "\n", args.out)


if __name__ == "__main__":
    main()
