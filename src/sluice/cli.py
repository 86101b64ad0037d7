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
from sluice import admin, cli_dropbox, cli_jobs, cli_keys, cli_rules, cli_server, demo
from sluice.catalog import ISOLATION_LEVELS, Durability
from sluice.engine.topics import Start
from sluice.message import Message, Position

__all__ = ["main"]

DEFAULT_URL = "sqlite:///sluice.db"

GROUPS = {"keys": "the HTTP server's API keys and their grants: add, list, revoke"}
"""Commands that are groups of commands ("sluice keys add"), with their help."""


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
        f"{s.name}\t{s.kind}{'' if s.topic is None else ' of ' + s.topic}"
        f"\tmax_attempts={s.max_attempts}\terror_queue={s.error_queue}\t{s.durability}"
        + ("\tpaused" if s.paused else "")
        for s in specs
    )
    _out(args, [asdict(s) for s in specs], text or "(no queues)")
    return 0


def cmd_create(args: argparse.Namespace, db: sluice.Database) -> int:
    durability: Durability = "transient" if args.transient else "persistent"
    if args.topic:
        if args.max_attempts is not None or args.error_queue or args.max_in_flight:
            raise sluice.ConfigurationError(
                "a topic is not consumed itself: give --max-attempts, --error-queue and "
                "--max-in-flight to its subscriptions (sluice subscribe)"
            )
        if args.isolation != "none":
            raise sluice.ConfigurationError("--isolation is for plain queues only")
        db.create_topic(
            args.queue,
            durability=durability,
            max_size=args.max_size,
            priority_levels=args.priority_levels,
            retention=args.retention,
            exist_ok=args.exist_ok,
        )
    else:
        db.create_queue(
            args.queue,
            max_attempts=args.max_attempts,
            error_queue=args.error_queue,
            durability=durability,
            max_size=args.max_size,
            isolation=args.isolation,
            priority_levels=args.priority_levels,
            max_in_flight=args.max_in_flight,
            retention=args.retention,
            exist_ok=args.exist_ok,
        )
    kind = "topic" if args.topic else "queue"
    _out(args, {"created": args.queue, "kind": kind}, f"created {kind} {args.queue}")
    return 0


def cmd_subscribe(args: argparse.Namespace, db: sluice.Database) -> int:
    db.subscribe(
        args.topic,
        args.name,
        where=args.where,
        start=_start(args.start),
        expire_after=args.expire_after,
        window=args.window,
        max_attempts=args.max_attempts,
        error_queue=args.error_queue,
        max_in_flight=args.max_in_flight,
        retention=args.retention,
        exist_ok=args.exist_ok,
    )
    _out(args, {"subscribed": args.name, "topic": args.topic},
         f"subscribed {args.name} to {args.topic}")  # fmt: skip
    return 0


def _start(text: str) -> Start:
    if text in ("new", "first"):
        return text  # type: ignore[return-value]
    if text.isdigit():
        return int(text)
    return Position.parse(text)


def cmd_unsubscribe(args: argparse.Namespace, db: sluice.Database) -> int:
    db.unsubscribe(args.name)
    _out(args, {"unsubscribed": args.name}, f"unsubscribed {args.name}")
    return 0


def cmd_pause(args: argparse.Namespace, db: sluice.Database) -> int:
    db.queue(args.queue).pause()
    _out(args, {"queue": args.queue, "paused": True}, f"paused {args.queue}")
    return 0


def cmd_resume(args: argparse.Namespace, db: sluice.Database) -> int:
    db.queue(args.queue).resume()
    _out(args, {"queue": args.queue, "paused": False}, f"resumed {args.queue}")
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
        args.limit, state=args.state, where=args.where, order_by=args.order_by, after=args.after
    )
    rows = [_message_dict(m) | {"position": str(m.position)} for m in msgs]
    text = "\n".join(
        f"{r['position']}\t{r['id']}\tp={r['priority']}\t{json.dumps(r['body'])}" for r in rows
    )
    _out(args, rows, text or "(empty)")
    return 0


def cmd_stats(args: argparse.Namespace, db: sluice.Database) -> int:
    lines: list[str] = []
    data: Any = {}
    if args.queue is not None:
        spec = db.queue(args.queue).spec
        stats = db.queue(args.queue).stats()
        data = stats | {"paused": spec.paused}
        lines.append("  ".join(f"{k}={v}" for k, v in stats.items()) + _paused(spec.paused))
        subs = []
        if spec.kind != "queue":
            topic = spec.topic if spec.kind == "subscription" else args.queue
            subs = [
                s for s in db.subscriptions(topic) if spec.kind == "topic" or s.name == spec.name
            ]
    else:
        subs = db.subscriptions()
    now = db.clock.now()
    if subs or args.queue is None:
        rows = [
            {"subscription": s.name, "topic": s.topic, "where": s.where, "lag": s.lag,
             "lag_seconds": round(s.lag_seconds(now), 3), "held": s.held,
             "backlog": s.backlog, "position": s.position}
            for s in subs
        ]  # fmt: skip
        data = {"stats": data, "subscriptions": rows} if args.queue is not None else rows
        lines += [
            f"{r['subscription']}\ttopic={r['topic']}\tlag={r['lag']}"
            f"\tlag_seconds={r['lag_seconds']}\twhere={r['where'] or '-'}"
            for r in rows
        ]
    _out(args, data, "\n".join(lines) or "(no subscriptions)")
    return 0


def _paused(paused: bool) -> str:
    return "  (paused: consumers take nothing; sluice resume)" if paused else ""


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
        exclusive=args.exclusive,
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


Adder = Callable[[str, Callable[..., int], str], argparse.ArgumentParser]
"""Adds a command: its name, the function that runs it, its help text; its parser."""


def _adder(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> Adder:
    """What adds the commands under ``sub``, each with the ``common`` options."""
    groups: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}

    def add(name: str, func: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        # "keys add" is the command add of the group keys (GROUPS). Only the group's
        # commands take the common options, so that they go after the command as
        # everywhere: a --db given to the group too would be overridden by theirs.
        group, _, command = name.rpartition(" ")
        under = sub
        if group:
            if group not in groups:
                text = GROUPS[group]
                parent = sub.add_parser(group, help=text, description=text)
                groups[group] = parent.add_subparsers(
                    dest="action", required=True, metavar="ACTION", help="what to do"
                )
            under = groups[group]
        p = under.add_parser(command, parents=[common], help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    return add


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
    add = _adder(sub, common)
    p = add("demo", cmd_demo, "run the transactional producer/consumer demo on a fresh database")
    p.add_argument(
        "--readers", type=int, default=10_000, help="recipients of the mass mailing's report"
    )
    p.set_defaults(needs_db=False, db_default="sluice-demo.db")
    p = add("db", cmd_db, "show the database's schema version, or upgrade it")
    p.add_argument("action", choices=["version", "upgrade"], help="what to do")
    p.set_defaults(needs_db=False)
    add("queues", cmd_queues, "list queues and their settings")
    _create_parser(add("create", cmd_create, "create a queue (or, with --topic, a topic)"))
    _subscribe_parser(add("subscribe", cmd_subscribe, "subscribe to a topic (docs/topics.md)"))
    p = add("unsubscribe", cmd_unsubscribe, "end a subscription and drop what it holds")
    p.add_argument("name", help="subscription name")
    _pause_parsers(add)
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
        choices=["ready", "delayed", "claimed", "expired", "failed", "done"],
        help="which messages",
    )
    p.add_argument("--after", help="a position (as browse prints it): the page after it")
    _selection_options(p)
    p = add("stats", cmd_stats, "count a queue's messages by state; subscriptions' lag")
    p.add_argument(
        "queue", nargs="?", help="queue, topic or subscription (none: every subscription's lag)"
    )
    p = add("purge", cmd_purge, "delete kept expired, failed or done messages")
    p.add_argument("queue", help="queue name")
    p.add_argument("state", choices=["expired", "failed", "done"], help="which kept messages")
    p.add_argument("--older-than", type=float, default=0.0, help="only those older (seconds)")
    add("recover", cmd_recover, "roll back sessions whose owners died")
    _pipeline_parser(
        add("pipeline", cmd_pipeline, "run a queue -> Spark SQL -> queue pipeline (sluice-queue[spark])")
    )
    for module in (cli_jobs, cli_rules, cli_keys, cli_server, cli_dropbox):
        module.add_commands(add)
    return parser


def _pause_parsers(add: Adder) -> None:
    for name, func, text in (
        ("pause", cmd_pause, "pause a queue: its consumers take nothing until it is resumed"),
        ("resume", cmd_resume, "resume a paused queue: its consumers take again"),
    ):
        add(name, func, text).add_argument("queue", help="queue or subscription name")


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
    p.add_argument("--exist-ok", action="store_true", help="succeed if the queue exists")
    p.add_argument("--topic", action="store_true", help="a topic: every subscription gets each")
    _delivery_options(p)


def _delivery_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--priority-levels",
        type=int,
        help="map priorities 0-9 onto this many levels, FIFO within one (docs/delivery.md)",
    )
    p.add_argument(
        "--max-in-flight", type=int, help="most messages its consumers hold unsettled at once"
    )
    p.add_argument(
        "--retention", type=_retention, help="keep settled messages: seconds or 'forever'"
    )


def _retention(text: str) -> float | str:
    if text == "forever":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither seconds nor 'forever'") from None


def _subscribe_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", help="topic name")
    p.add_argument("name", help="the subscription's name: consume it as a queue of that name")
    p.add_argument("--where", help="only messages this expression holds for")
    p.add_argument(
        "--start", default="new", help="'new' (default), 'first', or a position from browse"
    )
    p.add_argument("--expire-after", type=float, help="seconds unused before it is dropped")
    p.add_argument("--window", type=int, help="messages taken ahead of consumers (default 1000)")
    p.add_argument("--max-attempts", type=int, help="deliveries before the error queue")
    p.add_argument("--error-queue", help="where failed messages go (created if missing)")
    p.add_argument("--max-in-flight", type=int, help="most messages held unsettled at once")
    p.add_argument(
        "--retention", type=_retention, help="keep settled messages: seconds or 'forever'"
    )
    p.add_argument("--exist-ok", action="store_true", help="succeed if it exists already")


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
    p.add_argument(
        "--exclusive",
        action="store_true",
        help="the pipeline is the source's only consumer: read it by id range (docs/spark.md)",
    )
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
