"""The ``sluice worker`` and ``sluice jobs`` commands (docs/jobs.md)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time

import sluice
from sluice.cli.options import Adder, Progress, add_progress_option
from sluice.jobs.model import JobStatus

__all__ = ["add_commands", "load_app", "progress_bar"]

_BAR = 30


def load_app(spec: str) -> sluice.Database:
    """The Database named by ``module:attribute`` (its module registers the task functions)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise sluice.ConfigurationError(
            f"name the app as module:attribute (myapp.tasks:db), not {spec!r}"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: the project's own modules
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise sluice.ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
    db = getattr(module, attribute, None)
    if not isinstance(db, sluice.Database):
        raise sluice.ConfigurationError(
            f"{spec} is not a sluice Database (got {type(db).__name__}); "
            "point at the object your @db.task functions were registered on"
        )
    return db


def cmd_worker(args: argparse.Namespace) -> int:
    db = load_app(args.app)
    tasks = [t for t in (args.tasks or "").split(",") if t] or None
    worker = db.worker(
        tasks=tasks, concurrency=args.concurrency, batch=args.batch, grace=args.grace
    )
    print(
        f"sluice worker: {worker.concurrency} thread(s) for "
        f"{', '.join(tasks or sorted(db.task_functions))}; SIGTERM or Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    done = worker.stats

    def counts() -> dict[str, int]:
        return {"processed": done.processed, "failed": done.failed, "errors": done.errors}

    try:
        with Progress("sluice worker", counts, every=args.progress):
            worker.run()
    finally:
        db.close()
    print(f"sluice worker: stopped after {done.processed} task(s), {done.failed} failed, "
          f"{done.errors} failed run(s)", file=sys.stderr)  # fmt: skip
    return 0


def progress_bar(job: JobStatus) -> str:
    """One line: a bar, the share done and the counts."""
    filled = round(job.progress * _BAR)
    return (
        f"[{'#' * filled}{'.' * (_BAR - filled)}] {job.progress:6.1%} "
        f"{job.done}/{job.total} ok={job.succeeded} failed={job.failed} "
        f"running={job.running} {job.status}"
    )


def cmd_jobs(args: argparse.Namespace, db: sluice.Database) -> int:
    if args.watch:
        return _watch(args, db)
    jobs = db.jobs.list(open_only=args.open, limit=args.limit)
    if args.json:
        print(json.dumps([j.as_dict() for j in jobs]))
        return 0
    if not jobs:
        print("(no jobs)")
    for job in jobs:
        print(f"{job.id}\t{job.name}\t{progress_bar(job)}")
    return 0


def _watch(args: argparse.Namespace, db: sluice.Database) -> int:
    """Redraw the job's progress until it ends (or --once)."""
    while True:
        job = db.jobs.get(args.watch)
        if args.json:
            print(json.dumps(job.as_dict()), flush=True)
        else:
            end = "\n" if job.ended_at is not None or args.once else "\r"
            print(f"{job.name}: {progress_bar(job)}", end=end, flush=True)
        if job.ended_at is not None or args.once:
            return 0 if job.failed == 0 else 1
        time.sleep(args.interval)  # a person watching: redraw once a second


def add_commands(add: Adder) -> None:
    p = add("worker", cmd_worker, "run the task functions of an app until SIGTERM (docs/jobs.md)")
    p.add_argument("app", help="module:attribute of the Database the @db.task functions use")
    p.add_argument("--tasks", help="only these task types, comma-separated")
    add_progress_option(p)
    p.add_argument("--concurrency", type=int, default=4, help="worker threads (default 4)")
    p.add_argument(
        "--batch",
        type=int,
        help="tasks a thread settles per commit (default: adaptive, 1 to 64; docs/jobs.md)",
    )
    p.add_argument(
        "--grace", type=float, default=30.0, help="seconds to finish running tasks on SIGTERM"
    )
    p.set_defaults(needs_db=False)
    p = add("jobs", cmd_jobs, "list jobs and their progress, or watch one")
    p.add_argument("--open", action="store_true", help="only jobs that have not ended")
    p.add_argument("--limit", type=int, default=50, help="at most this many (newest first)")
    p.add_argument("--watch", metavar="JOB", help="show this job's progress bar until it ends")
    p.add_argument("--once", action="store_true", help="with --watch: draw once and exit")
    p.add_argument("--interval", type=float, default=1.0, help="with --watch: seconds per redraw")
