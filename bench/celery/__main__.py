"""``python -m bench celery [--quick] [--only BROKER] ...``: Celery on sluice (SQLite,
PostgreSQL) against Celery on Redis (a private ``redis-server``, ``appendfsync always``) and
RabbitMQ (durable queues, publisher confirms), same run: no-op and 10 ms tasks through one
worker of 4 prefork processes (tasks/s, latency p50/p99), then workers killed with SIGKILL
mid-task (tasks lost, tasks run twice), with kombu's SQLAlchemy transport in that comparison.
Report: bench/results/celery-<date>.md."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.celery.brokers import BROKERS, KILL_ONLY
from bench.celery.report import render
from bench.celery.runs import KillResult, RateResult, kill_run, rate_run
from bench.harness import add_common_options, write_report

__all__ = ["main"]

KINDS = (0.0, 0.010)  # task seconds: a no-op, a 10 ms sleep
KILL_TARGETS = ("pool process", "whole worker")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench celery", description=__doc__)
    parser.add_argument("--n", type=int, default=5_000, help="no-op tasks per throughput case")
    parser.add_argument("--n-sleep", type=int, default=2_000, help="10 ms tasks per case")
    parser.add_argument("--samples", type=int, default=300, help="paced tasks for the latency")
    parser.add_argument("--rate", type=float, default=25.0, help="paced tasks per second")
    parser.add_argument("--kill-n", type=int, default=200, help="tasks per kill run")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs per kill run")
    parser.add_argument(
        "--settle", type=float, default=60.0, help="seconds after the last kill for tasks to end"
    )
    parser.add_argument("--no-kill", action="store_true", help="skip the kill run")
    add_common_options(
        parser,
        quick="a smoke run of about a minute: few tasks, one kill, short waits",
        repeats=3,
        repeats_help="runs of each rate case, interleaved across brokers (the median is shown)",
        tmp_dir=None,
        only=list(BROKERS),
        only_help="brokers to run (repeatable); all by default",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.quick:
        args.n, args.n_sleep, args.samples = min(args.n, 100), min(args.n_sleep, 40), 20
        args.kill_n, args.kills, args.settle = min(args.kill_n, 24), 1, min(args.settle, 15.0)
        args.repeats = 1
    names = args.only or list(BROKERS)
    tmp_root: Path = args.tmp_dir or Path(tempfile.gettempdir())
    timeout = 300.0
    kill_seconds, gap = 0.2, 1.0
    load_before = os.getloadavg()
    rates: list[RateResult] = []
    # Each round runs every broker once, so that a slow spell of the machine falls on all.
    for seconds, _round in ((s, r) for s in KINDS for r in range(max(args.repeats, 1))):
        n = args.n if not seconds else args.n_sleep
        for name in names:
            if name in KILL_ONLY:
                continue
            t0 = time.monotonic()
            rates.append(
                rate_run(BROKERS[name], tmp_root, seconds=seconds, n=n, samples=args.samples,
                         rate=args.rate, timeout=timeout)
            )  # fmt: skip
            print(
                f"celery on {name}, {n} tasks of {seconds * 1000:g} ms:"
                f" {rates[-1].status} ({time.monotonic() - t0:.1f} s)",
                file=sys.stderr,
            )
    kills: list[KillResult] = []
    for target in () if args.no_kill else KILL_TARGETS:
        for name in names:
            t0 = time.monotonic()
            kills.append(
                kill_run(BROKERS[name], tmp_root, target=target, n=args.kill_n,
                         seconds=kill_seconds, kills=args.kills, gap=gap, settle=args.settle)
            )  # fmt: skip
            print(
                f"celery on {name}, SIGKILL to a {target}: {kills[-1].lost} lost,"
                f" {kills[-1].twice} twice, {kills[-1].status} ({time.monotonic() - t0:.1f} s)",
                file=sys.stderr,
            )
    report = render(
        rates,
        kills,
        tmp_root=tmp_root,
        samples=args.samples,
        rate=args.rate,
        kill_seconds=kill_seconds,
        gap=gap,
        settle=args.settle,
        load_before=load_before,
        load_after=os.getloadavg(),
        quick=args.quick,
    )
    write_report("celery", report, args.out)
    statuses = [r.status for r in rates] + [k.status for k in kills]
    return 0 if all(status == "ok" for status in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
