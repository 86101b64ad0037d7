"""``sluice apply`` and ``sluice run``: a rules application from the command line
(docs/rules.md)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import sluice
from sluice.cli.options import Adder, Progress, add_progress_option
from sluice.errors import ConfigurationError

if TYPE_CHECKING:
    from sluice.rules.engine import RunStats

__all__ = ["add_commands"]


def _read(path: str) -> str:
    try:
        return Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read the rules file {path!r}: {exc}") from None


def cmd_apply(args: argparse.Namespace, db: sluice.Database) -> int:
    app = db.apply(_read(args.file))
    print(
        f"applied {args.file}: {len(app.queues)} queue(s), {len(app.properties)} "
        f"property(ies), {len(app.slicings)} slicing(s), {len(app.rules)} rule(s)"
    )
    return 0


def cmd_run(args: argparse.Namespace, db: sluice.Database) -> int:
    if args.engine == "spark":
        return _run_on_spark(args, db)
    if args.file:
        db.apply(_read(args.file))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        db.context.wakeups.notify()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    gateways = db.gateways.list()
    running = "the rules" + (f" and {len(gateways)} gateway(s)" if gateways else "")
    print(f"sluice run: running {running}; SIGTERM or Ctrl-C to stop", file=sys.stderr,
          flush=True)  # fmt: skip
    if gateways:
        db.gateways.start(poll=args.poll)

    def counts() -> dict[str, int]:
        now, sent = db.rules.stats, db.gateways.stats
        return {"processed": now.processed, "produced": now.produced, "errors": now.errors} | (
            {"delivered": sent.delivered, "delivery failures": sent.failed} if gateways else {}
        )

    try:
        with Progress("sluice run", counts, every=args.progress):
            stats = db.rules.run(batch=args.batch, stop=stop, workers=args.workers)
    finally:
        db.gateways.stop()
    _stopped(stats, db, bool(gateways))
    return 0


def _stopped(stats: RunStats, db: sluice.Database, gateways: bool) -> None:
    """The last line of ``sluice run`` on either engine."""
    sent = db.gateways.stats  # every failure counts: the rules' and the deliveries'
    print(
        f"sluice run: stopped after {stats.processed} message(s) processed, "
        f"{stats.produced} produced, {stats.errors + sent.failed} error(s), "
        f"{stats.removed} removed"
        + (f"; gateways: {sent.delivered} delivered, {sent.failed} failed" if gateways else ""),
        file=sys.stderr,
    )


def _run_on_spark(args: argparse.Namespace, db: sluice.Database) -> int:
    """``sluice run --engine spark``: the same application on Spark (docs/rules.md).

    SIGTERM and Ctrl-C stop it as they stop the local engine: after the transaction at
    hand, exit 0 with the summary (sluice.spark.rules: nothing lost, nothing done twice).
    """
    from sluice.spark.pipeline import spark_session  # noqa: PLC0415  (pyspark is an extra)
    from sluice.spark.rules import run_rules, start_rules  # noqa: PLC0415
    from sluice.spark.stopping import await_query, stop_on_signals  # noqa: PLC0415

    if not args.checkpoint:
        raise ConfigurationError(
            "sluice run --engine spark needs --checkpoint DIR: where Spark keeps the query's "
            "progress (keep it with --name)"
        )
    text = _read(args.file) if args.file else None
    spark = spark_session(args.master, f"sluice-rules-{args.name}")
    stop = stop_on_signals()  # after the session: it installs a SIGINT handler of its own
    options = {"checkpoint": args.checkpoint, "name": args.name,
               "max_per_batch": args.max_per_batch}  # fmt: skip
    if args.once:
        stats = run_rules(spark, args.db, text, stop=stop, **options)
        print(
            f"sluice run: {stats.batches} micro-batch(es) on Spark, {stats.processed} "
            f"message(s) processed, {stats.produced} produced, {stats.errors} error(s), "
            f"{stats.removed} removed" + ("; stopped" if stop.is_set() else ""),
            file=sys.stderr,
        )
        spark.stop()
        return 0
    run = start_rules(spark, args.db, text, interval=args.interval, **options)
    gateways = db.gateways.list()
    print(f"sluice run: running the rules on Spark ({args.master})"
          + (f" and {len(gateways)} gateway(s)" if gateways else "")
          + "; SIGTERM or Ctrl-C to stop", file=sys.stderr, flush=True)  # fmt: skip
    if gateways:
        db.gateways.start(poll=args.poll)
    try:
        await_query(run.query, stop)  # a failed query raises here, as it did
    finally:
        try:
            stats = run.stop()
        finally:
            db.gateways.stop()
    _stopped(stats, db, bool(gateways))
    spark.stop()
    return 0


def cmd_gateways(args: argparse.Namespace, db: sluice.Database) -> int:
    found = db.gateways.list()
    # Header values may hold a secret (an API key for the other side): never shown.
    shown = [{k: ("***" if k.startswith("header_") else v) for k, v in g.settings.items()}
             for g in found]  # fmt: skip
    if args.json:
        print(json.dumps([{"queue": g.queue, "direction": g.direction,
                           "transport": g.transport, "settings": settings}
                          for g, settings in zip(found, shown, strict=True)]))  # fmt: skip
        return 0
    if not found:
        print("(no gateway queues; a rules file declares them: docs/gateways.md)")
    for g, settings_of in zip(found, shown, strict=True):
        settings = ", ".join(f"{k}={v!r}" for k, v in sorted(settings_of.items()))
        print(f"{g.queue}\t{g.direction}\t{g.transport}\t{settings}")
    return 0


def add_commands(add: Adder) -> None:
    p = add("apply", cmd_apply, "apply a rules definition file (docs/rules.md)")
    p.add_argument("file", help="the definition: CREATE QUEUE / PROPERTY / SLICING / RULE ...")
    p = add("run", cmd_run, "run the rules, echo timers and gateways until SIGTERM "
            "(docs/rules.md, docs/gateways.md)")  # fmt: skip
    p.add_argument("file", nargs="?", help="apply this definition first")
    add_progress_option(p)
    p.add_argument("--batch", type=int, default=256, help="messages per transaction")
    p.add_argument(
        "--workers", type=int, default=1, help="batches processed at once (docs/rules.md)"
    )
    p.add_argument(
        "--poll", type=float, default=1.0, help="seconds a gateway waits for news at a time"
    )
    p.add_argument(
        "--engine", choices=("local", "spark"), default="local",
        help="where the rules run: this process (local) or Spark Structured Streaming",
    )  # fmt: skip
    p.add_argument("--master", default="local[*]", help="Spark's master (--engine spark)")
    p.add_argument("--checkpoint", help="the Spark query's checkpoint directory (--engine spark)")
    p.add_argument("--name", default="rules", help="the Spark query's name (--engine spark)")
    p.add_argument(
        "--max-per-batch", type=int, default=10_000,
        help="messages per queue and micro-batch (--engine spark)",
    )  # fmt: skip
    p.add_argument("--interval", type=float, help="seconds between micro-batches (--engine spark)")
    p.add_argument(
        "--once", action="store_true",
        help="process what is due, then stop (--engine spark; the local engine: sluice run "
        "until SIGTERM)",
    )  # fmt: skip
    add("gateways", cmd_gateways, "list the gateway queues (docs/gateways.md)")
