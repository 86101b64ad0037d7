"""The ``sluice`` command: a thin shell over the library.

The database URL comes from ``--db`` or the ``SLUICE_URL`` environment variable
(default ``sqlite:///sluice.db``). ``--json`` prints machine-readable output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import sluice
from sluice import admin, cli_jobs, demo
from sluice.catalog import ISOLATION_LEVELS
from sluice.message import Message

__all__ = ["main"]

DEFAULT_URL = "sqlite:///sluice.db"


def _message_dict(m: Message) -> dict[str, Any]:
    body = m.body if not isinstance(m.body, bytes) else m.body.hex()
    return {
        "id": m.id,
        "queue": m.queue,
        "priority": m.priority,
        "state": m.state.name.lower(),
        "attempts": m.attempts,
        "content_type": m.content_type,
        "enqueued_at": m.enqueued_at.isoformat(),
        "properties": m.properties,
        "error": m.error,
        "type": m.type,
        "group": m.group,
        "body": body,
    }


def _selection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--where", help="only messages this expression holds for (docs/expressions.md)")
    p.add_argument(
        "--order-by",
        action="append",
        metavar="KEY",
        help="order by this expression first ('body.total DESC'); repeatable",
    )


def _out(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, default=str) if args.json else text)


def cmd_demo(args: argparse.Namespace) -> int:
    url = args.db if "://" in args.db else f"sqlite:///{args.db}"
    argv = [url, f"--readers={args.readers}"]
    return demo.main([*argv, "--json"] if args.json else argv)


def cmd_queues(args: argparse.Namespace, db: sluice.Database) -> int:
    specs = db.queues()
    text = "\n".join(
        f"{s.name}\tmax_attempts={s.max_attempts}\terror_queue={s.error_queue}\t{s.durability}"
        for s in specs
    )
    _out(args, [asdict(s) for s in specs], text or "(no queues)")
    return 0


def cmd_create(args: argparse.Namespace, db: sluice.Database) -> int:
    db.create_queue(
        args.queue,
        max_attempts=args.max_attempts,
        error_queue=args.error_queue,
        durability="transient" if args.transient else "persistent",
        max_size=args.max_size,
        isolation=args.isolation,
        priority_levels=args.priority_levels,
        max_in_flight=args.max_in_flight,
        exist_ok=args.exist_ok,
    )
    _out(args, {"created": args.queue}, f"created {args.queue}")
    return 0


def cmd_drop(args: argparse.Namespace, db: sluice.Database) -> int:
    db.drop_queue(args.queue)
    _out(args, {"dropped": args.queue}, f"dropped {args.queue}")
    return 0


def cmd_put(args: argparse.Namespace, db: sluice.Database) -> int:
    body: Any = args.body
    if args.json_body:
        try:
            body = json.loads(args.body)
        except json.JSONDecodeError as exc:
            raise sluice.InvalidBody(f"--json-body: the body is not valid JSON ({exc})") from exc
    mid = db.queue(args.queue).put(
        body, priority=args.priority, delay=args.delay, ttl=args.ttl, group=args.group
    )
    _out(args, {"id": mid}, mid)
    return 0


def cmd_get(args: argparse.Namespace, db: sluice.Database) -> int:
    m = db.queue(args.queue).get(wait=args.wait, where=args.where, order_by=args.order_by)
    if m is None:
        _out(args, None, "(no message)")
        return 3
    if args.release:
        m.release()
    else:
        m.ack()
    _out(args, _message_dict(m), json.dumps(_message_dict(m)["body"], default=str))
    return 0


def cmd_browse(args: argparse.Namespace, db: sluice.Database) -> int:
    msgs = db.queue(args.queue).browse(
        args.limit, state=args.state, where=args.where, order_by=args.order_by
    )
    rows = [_message_dict(m) for m in msgs]
    text = "\n".join(f"{r['id']}\tp={r['priority']}\t{json.dumps(r['body'])}" for r in rows)
    _out(args, rows, text or "(empty)")
    return 0


def cmd_stats(args: argparse.Namespace, db: sluice.Database) -> int:
    stats = db.queue(args.queue).stats()
    _out(args, stats, "  ".join(f"{k}={v}" for k, v in stats.items()))
    return 0


def cmd_purge(args: argparse.Namespace, db: sluice.Database) -> int:
    gone = db.queue(args.queue).purge(args.state, older_than=args.older_than)
    _out(args, {"purged": gone}, f"purged {gone} {args.state} message(s)")
    return 0


def cmd_recover(args: argparse.Namespace, db: sluice.Database) -> int:
    dead = db.recover()
    _out(args, {"rolled_back_sessions": dead}, f"rolled back sessions: {dead or 'none'}")
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    if args.action == "upgrade":
        before, after = admin.upgrade(args.db)
        text = (
            f"schema upgraded from version {before} to {after}"
            if before != after
            else f"schema is at version {after}, this sluice's; nothing to do"
        )
        _out(args, {"before": before, "after": after}, text)
        return 0
    found, latest = admin.schema_version(args.db)
    _out(args, {"version": found, "code": latest}, f"{found or 'none'} (this sluice: {latest})")
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:
    """Run a queue-to-queue pipeline on a local Spark session (docs/spark.md)."""
    from sluice.spark.pipeline import run_pipeline, spark_session  # noqa: PLC0415  (pyspark is an extra)

    routes: dict[str, str] = {}
    for route in args.to or []:
        queue, sep, query = route.partition("=")
        if not sep or not queue or not query.strip():
            raise sluice.ConfigurationError(f"--to wants QUEUE=SQL, not {route!r}")
        routes[queue] = query
    if bool(routes) == bool(args.sql):
        raise sluice.ConfigurationError("give either --sql or one or more --to QUEUE=SQL")
    spark = spark_session(args.master, f"sluice-pipeline-{args.name}")
    query = run_pipeline(
        spark,
        args.db,
        source=args.source,
        name=args.name,
        checkpoint=args.checkpoint,
        sql=routes or args.sql,
        where=args.where,
        target=args.target,
        body_schema=args.body_schema,
        max_per_batch=args.max_per_batch,
        once=not args.follow,
        interval=args.interval,
    )
    if args.follow:
        query.awaitTermination()  # until stopped (Ctrl-C) or failed
    progress = query.recentProgress
    batches = len([p for p in progress if p["numInputRows"]])
    # Spark's count: each target's query reads the batch's messages once.
    rows = sum(p["numInputRows"] for p in progress)
    _out(
        args,
        {"batches": batches, "input_rows": rows},
        f"{batches} batch(es); Spark read {rows} input row(s)",
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice", description="sluice message queues")
    parser.add_argument("--version", action="version", version=f"sluice {sluice.__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        default=os.environ.get("SLUICE_URL", DEFAULT_URL),
        help="database URL or SQLite path (env SLUICE_URL; default %(default)s)",
    )
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    p = add("demo", cmd_demo, "run the transactional producer/consumer demo on a fresh database")
    p.add_argument(
        "--readers", type=int, default=10_000, help="recipients of the mass mailing's report"
    )
    p.set_defaults(needs_db=False, db_default="sluice-demo.db")
    p = add("db", cmd_db, "show the database's schema version, or upgrade it")
    p.add_argument("action", choices=["version", "upgrade"], help="what to do")
    p.set_defaults(needs_db=False)
    add("queues", cmd_queues, "list queues and their settings")
    _create_parser(add("create", cmd_create, "create a queue"))
    p = add("drop", cmd_drop, "drop a queue and its messages")
    p.add_argument("queue", help="queue name")
    p = add("put", cmd_put, "enqueue one message")
    p.add_argument("queue", help="queue name")
    p.add_argument("body", help="message body (text, or JSON with --json-body)")
    p.add_argument("--json-body", action="store_true", help="parse the body as JSON")
    p.add_argument("--priority", type=int, help="higher first (default 0)")
    p.add_argument("--delay", type=float, default=0.0, help="seconds until visible")
    p.add_argument("--ttl", type=float, help="seconds until it expires")
    p.add_argument("--group", help="taken in order, one transaction at a time, per group")
    p = add("get", cmd_get, "take one message and acknowledge it (exit 3 if none)")
    p.add_argument("queue", help="queue name")
    p.add_argument("--wait", type=float, default=0.0, help="seconds to wait for one")
    p.add_argument("--release", action="store_true", help="give it back instead of acking")
    _selection_options(p)
    p = add("browse", cmd_browse, "show messages without taking them")
    p.add_argument("queue", help="queue name")
    p.add_argument("--limit", type=int, default=20, help="at most this many")
    p.add_argument(
        "--state",
        default="ready",
        choices=["ready", "delayed", "claimed", "expired", "failed"],
        help="which messages",
    )
    _selection_options(p)
    p = add("stats", cmd_stats, "count a queue's messages by state")
    p.add_argument("queue", help="queue name")
    p = add("purge", cmd_purge, "delete kept expired or failed messages")
    p.add_argument("queue", help="queue name")
    p.add_argument("state", choices=["expired", "failed"], help="which kept messages")
    p.add_argument("--older-than", type=float, default=0.0, help="only those older (seconds)")
    add("recover", cmd_recover, "roll back sessions whose owners died")
    _pipeline_parser(
        add("pipeline", cmd_pipeline, "run a queue -> Spark SQL -> queue pipeline (sluice[spark])")
    )
    cli_jobs.add_commands(add)
    return parser


def _create_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("queue", help="queue name")
    p.add_argument("--max-attempts", type=int, help="deliveries before the error queue")
    p.add_argument("--error-queue", help="where failed messages go (created if missing)")
    p.add_argument("--transient", action="store_true", help="no fsync at commit")
    p.add_argument("--max-size", type=int, help="largest body in bytes (default 1 MiB)")
    p.add_argument(
        "--isolation",
        choices=list(ISOLATION_LEVELS),
        default="none",
        help="how concurrent readers are isolated (docs/isolation.md)",
    )
    p.add_argument(
        "--priority-levels",
        type=int,
        help="map priorities 0-9 onto this many levels, FIFO within one (docs/delivery.md)",
    )
    p.add_argument(
        "--max-in-flight", type=int, help="most messages its consumers hold unsettled at once"
    )
    p.add_argument("--exist-ok", action="store_true", help="succeed if the queue exists")


def _pipeline_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="the input queue, read as a stream")
    p.add_argument("--name", required=True, help="the pipeline's stream and sink name")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    p.add_argument("--sql", help="a query over the view 'messages' (with a queue column)")
    p.add_argument(
        "--to",
        action="append",
        metavar="QUEUE=SQL",
        help="a target queue and the query that makes its messages; repeatable",
    )
    p.add_argument("--target", help="the target queue of --sql rows without a queue column")
    p.add_argument("--where", help="only input messages this expression holds for")
    p.add_argument("--body-schema", help="parse input bodies as this Spark schema (DDL)")
    p.add_argument("--max-per-batch", type=int, default=10_000, help="messages per micro-batch")
    p.add_argument("--follow", action="store_true", help="keep running for new messages")
    p.add_argument("--interval", type=float, help="with --follow: seconds between batches")
    p.add_argument("--master", default="local[*]", help="Spark master (default %(default)s)")
    p.set_defaults(needs_db=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command in ("db", "pipeline", "worker"):
            return int(args.func(args))
        if args.command == "demo":
            if args.db == os.environ.get("SLUICE_URL", DEFAULT_URL):
                args.db = args.db_default
            return int(args.func(args))
        with sluice.connect(args.db) as db:
            return int(args.func(args, db))
    except sluice.SluiceError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
