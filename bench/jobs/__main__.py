"""Worker throughput of no-op tasks: sluice against Celery, Dramatiq, RQ and procrastinate.

``python -m bench jobs [--n N]`` runs sluice's workers (4 processes, SQLite at
FULL and PostgreSQL with fsync; the default settings, where a worker adapts how many
tasks it settles per commit, then one and ten tasks per transaction) and then
the peers of ``bench.jobs.peers`` in the same run, and writes
``bench/results/jobs-DATE.md`` with ratios to the best peer of equal durability.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import psycopg

from bench.harness import add_common_options, report_path
from bench.jobs.peers import (
    DEFAULT_N,
    DEFAULT_WORKERS,
    PeerResult,
    render,
    run_peers,
)
from bench.jobs.sluice import SluiceResult, run_sluice
from sluice.jobs.worker import ADAPTIVE_BUDGET, ADAPTIVE_MAX

__all__ = ["main"]

PG_BASE = os.environ.get("SLUICE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1/test")
_SCHEMA = "bench_jobs"
_SQLITE = "SQLite WAL, synchronous=FULL: fsync per commit"
_POSTGRES = "PostgreSQL fsync=on, synchronous_commit=on for commits"
_BATCHES: tuple[int | None, ...] = (None, 1, 10)  # None: the default, adaptive


def _durable(result: PeerResult) -> bool:
    """Whether a peer keeps each acknowledged task on disk (fsync) as sluice does."""
    return "always" in result.durability or result.peer.startswith("procrastinate")


def _run_sluice(n: int, workers: int, modes: Sequence[str]) -> list[SluiceResult]:
    results = []
    for mode in modes:
        with tempfile.TemporaryDirectory() as tmp:
            for batch in _BATCHES:
                path = Path(tmp) / f"jobs-{batch or 'default'}.db"
                results.append(
                    run_sluice(f"sqlite:///{path}", _SQLITE, n=n, workers=workers, batch=batch,
                               mode=mode)
                )  # fmt: skip
        for batch in _BATCHES:
            with psycopg.connect(PG_BASE, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {_SCHEMA} CASCADE")
            try:
                results.append(
                    run_sluice(f"{PG_BASE}?schema={_SCHEMA}", _POSTGRES, n=n, workers=workers,
                               batch=batch, mode=mode)
                )  # fmt: skip
            finally:
                with psycopg.connect(PG_BASE, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA IF EXISTS {_SCHEMA} CASCADE")
    return results


def _best(peers: Sequence[PeerResult], mode: str, *, durable: bool) -> float | None:
    rates = [
        p.tasks_per_s
        for p in peers
        if p.mode == mode and p.tasks_per_s and p.status == "ok" and (_durable(p) or not durable)
    ]
    return max(rates, default=None)


def _table(ours: Sequence[SluiceResult], peers: Sequence[PeerResult]) -> list[str]:
    out = [
        "## sluice",
        "",
        "4 worker processes (`python -m bench.jobs.sluice`), each `db.worker(concurrency=1,"
        " batch=B)` with a no-op `@db.task`, started and ready before the clock; then N tasks"
        " submitted with `db.jobs.submit_tasks` in transactions of 1,000. Live: the workers"
        " take tasks while they are submitted, seconds = start of the submission to the last"
        " task settled (the queue polled every 20 ms). Backlog: the ready workers are told to"
        " start once all are submitted, seconds from then (not SIGSTOP as for the peers: a"
        " process stopped inside a SQLite write would lock the file). Each task is settled"
        " in a committed, durable transaction: with batch B a worker settles B tasks per"
        " commit; by default (no batch given) each worker thread starts at one task per"
        " commit and doubles it while full batches settle within"
        f" {ADAPTIVE_BUDGET * 1000:g} ms, up to {ADAPTIVE_MAX}.",
        "",
        "| backend | shape | mode | N | tasks/s | seconds | vs best durable peer, same mode |"
        " vs best peer, same mode | durability | status |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in ours:
        rate = r.tasks_per_s
        best_durable = _best(peers, r.mode, durable=True)
        best_any = _best(peers, r.mode, durable=False)
        vs_durable = f"{rate / best_durable:.2f}" if rate and best_durable else "-"
        vs_any = f"{rate / best_any:.2f}" if rate and best_any else "-"
        out.append(
            f"| {r.backend} | {r.workers} | {r.mode} | {r.n:,} | {rate or 0:,.0f}"
            f" | {r.seconds or 0:.2f}"
            f" | {vs_durable} | {vs_any} | {r.durability} | {r.status} |"
        )
    out.append("")
    for mode in sorted({r.mode for r in ours}):
        out.append(
            f"Best peer, {mode}: at equal durability (an fsync before acknowledging)"
            f" {_best(peers, mode, durable=True) or 0:,.0f} tasks/s; at any durability"
            f" {_best(peers, mode, durable=False) or 0:,.0f} tasks/s."
        )
    out.append("")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench jobs", description=__doc__)
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="tasks per run")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="worker processes")
    parser.add_argument(
        "--peers",
        help="comma-separated peers to run (celery, dramatiq, rq, procrastinate); all by default",
    )
    add_common_options(parser, quick="a smoke run: 400 tasks, 2 workers")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.workers = min(args.n, 400), min(args.workers, 2)
    load = os.getloadavg()
    modes = ("live", "backlog")
    ours = _run_sluice(args.n, args.workers, modes)
    only = None if args.peers is None else set(args.peers.split(","))
    peers = run_peers(args.n, args.workers, modes=modes, only=only)
    report = render(peers, args.workers, load_before=load)
    head, _, rest = report.partition("\n\n")
    text = "\n".join(
        [head.replace("of Python peers", "of sluice and Python peers"), "", *_table(ours, peers),
         "## Peers", "", rest]
    )  # fmt: skip
    path = report_path("jobs", args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    print(text)
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
