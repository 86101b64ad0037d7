"""``sluice pipeline``: a queue -> Spark SQL -> queue pipeline on a local Spark session
(docs/spark.md), exactly once; it needs the spark extra and Java."""

from __future__ import annotations

import argparse

import sluice
from sluice.cli.options import Adder, Progress, add_progress_option
from sluice.cli.output import emit

__all__ = ["add_commands"]


def cmd_pipeline(args: argparse.Namespace) -> int:
    """Run a queue-to-queue pipeline on a local Spark session (docs/spark.md).

    SIGTERM and Ctrl-C stop it (exit 0, with the summary): the batch they interrupt is
    replayed by the next run, exactly once."""
    from sluice.spark.pipeline import run_pipeline, spark_session  # noqa: PLC0415  (pyspark is an extra)
    from sluice.spark.stopping import await_query, stop_on_signals  # noqa: PLC0415

    routes: dict[str, str] = {}
    for route in args.to or []:
        queue, sep, query = route.partition("=")
        if not sep or not queue or not query.strip():
            raise sluice.ConfigurationError(f"--to wants QUEUE=SQL, not {route!r}")
        routes[queue] = query
    if bool(routes) == bool(args.sql):
        raise sluice.ConfigurationError("give either --sql or one or more --to QUEUE=SQL")
    spark = spark_session(args.master, f"sluice-pipeline-{args.name}")
    stop = stop_on_signals()  # after the session: it installs a SIGINT handler of its own
    query = run_pipeline(
        spark,
        args.db,
        source=args.source,
        name=args.name,
        checkpoint=args.checkpoint,
        sql=routes or args.sql,
        where=args.where,
        target=args.target_queue,
        body_schema=args.body_schema,
        max_per_batch=args.max_per_batch,
        once=not args.follow,
        interval=args.interval,
        exclusive=args.exclusive,
        stop=stop,
    )
    if args.follow:

        def counts() -> dict[str, int]:
            done = query.recentProgress  # Spark keeps the last hundred or so
            return {"batches": len(done), "processed": sum(p["numInputRows"] for p in done)}

        with Progress(f"sluice pipeline {args.name}", counts, every=args.progress):
            if not await_query(query, stop):  # a failed query raises here
                query.stop()
    progress = query.recentProgress
    batches = len([p for p in progress if p["numInputRows"]])
    # Spark's count: each target's query reads the batch's messages once.
    rows = sum(p["numInputRows"] for p in progress)
    emit(
        args,
        {"batches": batches, "input_rows": rows},
        f"{batches} batch(es); Spark read {rows} input row(s)"
        + ("; stopped" if stop.is_set() else ""),
    )
    spark.stop()
    return 0


def _pipeline_parser(p: argparse.ArgumentParser) -> None:
    p.set_defaults(extra="spark")
    p.add_argument("source", help="the input queue, read as a stream")
    add_progress_option(p)
    p.add_argument("--name", required=True, help="the pipeline's stream and sink name")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    p.add_argument("--sql", help="a query over the view 'messages' (with a queue column)")
    p.add_argument(
        "--to",
        action="append",
        metavar="QUEUE=SQL",
        help="a target queue and the query that makes its messages; repeatable",
    )
    # Not args.target: the CLI keeps the chosen database there (cli.py's _dispatch).
    p.add_argument(
        "--target",
        dest="target_queue",
        help="the target queue of --sql rows without a queue column",
    )
    p.add_argument("--where", help="only input messages this expression holds for")
    p.add_argument("--body-schema", help="parse input bodies as this Spark schema (DDL)")
    p.add_argument("--max-per-batch", type=int, default=10_000, help="messages per micro-batch")
    p.add_argument(
        "--exclusive",
        action="store_true",
        help="the pipeline is the source's only consumer: read it by id range (docs/spark.md)",
    )
    p.add_argument("--follow", action="store_true", help="keep running for new messages")
    p.add_argument("--interval", type=float, help="with --follow: seconds between batches")
    p.add_argument("--master", default="local[*]", help="Spark master (default %(default)s)")
    p.set_defaults(needs_db=False)


def add_commands(add: Adder) -> None:
    _pipeline_parser(
        add(
            "pipeline",
            cmd_pipeline,
            "run a queue -> Spark SQL -> queue pipeline (the spark extra)",
        )
    )
