"""The ``sluice`` command: a thin shell over the library.

The database comes from ``--db`` or the ``SLUICE_URL`` environment variable (default
``sqlite:///sluice.db``, named on stderr when a command creates it); options go before or
after the command. ``--json`` prints machine-readable output; tables are for people.
"""

# PYTHON_ARGCOMPLETE_OK  (argcomplete looks for this marker: shell completion, sluice completion)

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import sluice
from sluice import (
    admin,
    cli_dropbox,
    cli_jobs,
    cli_keys,
    cli_rules,
    cli_server,
    cli_tail,
    demo,
    extras,
)
from sluice.catalog import ISOLATION_LEVELS, Durability
from sluice.cli_options import (
    Progress,
    Target,
    add_global_options,
    add_progress_option,
    configure_logging,
    sqlite_file,
    target,
)
from sluice.cli_output import age, emit, message_dict, note, table
from sluice.engine.topics import Start
from sluice.message import Position

__all__ = ["main"]

GROUPS = {"keys": "the HTTP server's API keys and their grants: add, list, revoke"}
"""Commands that are groups of commands ("sluice keys add"), with their help."""


def _selection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--where", help="only messages this expression holds for (docs/expressions.md)")
    p.add_argument(
        "--order-by",
        action="append",
        metavar="KEY",
        help="order by this expression first ('body.total DESC'); repeatable",
    )


def cmd_demo(args: argparse.Namespace) -> int:
    url = args.db if "://" in args.db else f"sqlite:///{args.db}"
    argv = [url, f"--readers={args.readers}"]
    return demo.main([*argv, "--json"] if args.json else argv)


OVERVIEW_HEADERS = ("NAME", "KIND", "READY", "DELAYED", "CLAIMED", "DEPTH", "OLDEST",
                    "LAG", "ERRORS", "PAUSED")  # fmt: skip


def _overview(args: argparse.Namespace, db: sluice.Database) -> int:
    """Every queue as a table: depths, the oldest ready message's age, lag, error queue."""
    now = db.clock.now()
    found = db.overview()
    rows = [
        (
            o.name,
            o.spec.kind + ("" if o.spec.topic is None else f" of {o.spec.topic}"),
            o.counts["ready"],
            o.counts["delayed"],
            o.counts["claimed"],
            o.depth,
            age(o.oldest_age(now)) if o.oldest_ready is not None else "-",
            None if o.subscription is None else o.subscription.lag,
            o.error_ready,
            o.spec.paused,
        )
        for o in found
    ]
    empty = f"(no queues in {args.target.describe()}; create one with: sluice create NAME)"
    emit(args, [o.as_dict(now) for o in found], table(OVERVIEW_HEADERS, rows, empty=empty))
    return 0


def cmd_queues(args: argparse.Namespace, db: sluice.Database) -> int:
    if args.settings:
        specs = db.queues()
        rows = [
            (s.name, s.kind, s.topic, s.max_attempts, s.error_queue, s.durability, s.isolation,
             s.priority_levels, s.max_in_flight, s.retention)
            for s in specs
        ]  # fmt: skip
        headers = ("NAME", "KIND", "TOPIC", "MAX_ATTEMPTS", "ERROR_QUEUE", "DURABILITY",
                   "ISOLATION", "LEVELS", "MAX_IN_FLIGHT", "RETENTION")  # fmt: skip
        emit(args, [asdict(s) for s in specs], table(headers, rows, empty="(no queues)"))
        return 0
    return _overview(args, db)


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
    where = args.target.describe()
    emit(args, {"created": args.queue, "kind": kind, "database": where},
         f"created {kind} {args.queue} in {where}")  # fmt: skip
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
    emit(args, {"subscribed": args.name, "topic": args.topic},
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
    emit(args, {"unsubscribed": args.name}, f"unsubscribed {args.name}")
    return 0


def cmd_pause(args: argparse.Namespace, db: sluice.Database) -> int:
    db.queue(args.queue).pause()
    emit(args, {"queue": args.queue, "paused": True}, f"paused {args.queue}")
    return 0


def cmd_resume(args: argparse.Namespace, db: sluice.Database) -> int:
    db.queue(args.queue).resume()
    emit(args, {"queue": args.queue, "paused": False}, f"resumed {args.queue}")
    return 0


def cmd_drop(args: argparse.Namespace, db: sluice.Database) -> int:
    db.drop_queue(args.queue)
    emit(args, {"dropped": args.queue}, f"dropped {args.queue}")
    return 0


def cmd_put(args: argparse.Namespace, db: sluice.Database) -> int:
    bodies = list(_bodies(args))
    properties = dict(_property(text) for text in args.properties)
    queue = db.queue(args.queue)
    options: dict[str, Any] = {
        "priority": args.priority, "delay": args.delay, "ttl": args.ttl, "group": args.group
    }  # fmt: skip
    if properties:
        options["properties"] = properties
    ids = queue.put_many(bodies, **options)
    if queue.spec.kind == "topic" and not db.subscriptions(args.queue):
        note(
            f"topic {args.queue} has no subscriptions, so nobody will receive "
            f"{'this message' if len(ids) == 1 else 'these messages'}: a subscription gets "
            "what is published after it is made (sluice subscribe)"
        )
    if len(ids) == 1 and args.body != "-":
        emit(args, {"id": ids[0]}, ids[0])
    else:
        emit(args, {"ids": ids}, "\n".join(ids))
    return 0


def _bodies(args: argparse.Namespace) -> Iterator[Any]:
    """The bodies to put: the argument, or with ``-`` standard input (JSON lines: a batch).

    Text that parses as JSON is JSON (``'{"a": 1}'`` is an object, ``42`` a number) unless
    ``--text``; other text is text.
    """
    if args.body != "-":
        if args.json_body:
            try:
                yield json.loads(args.body)
            except json.JSONDecodeError as exc:
                raise sluice.InvalidBody(
                    f"--json-body: the body is not valid JSON ({exc})"
                ) from None
            return
        yield args.body if args.text else _json_or_text(args.body)
        return
    data = sys.stdin.read()
    if args.text:
        yield data.removesuffix("\n")
        return
    try:
        yield json.loads(data)  # one document, perhaps over several lines
        return
    except json.JSONDecodeError:
        pass
    lines = [(n, line) for n, line in enumerate(data.splitlines(), 1) if line.strip()]
    if len(lines) <= 1:
        yield data.strip()  # one line of text
        return
    for n, line in lines:
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise sluice.InvalidBody(
                f"standard input line {n} is not JSON ({exc.msg} at column {exc.colno}); "
                "several lines are a batch of JSON lines, one message each; give --text to "
                "put the input as one text message"
            ) from None


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _property(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise sluice.ConfigurationError(f"--properties wants NAME=VALUE, not {text!r}")
    return name, _json_or_text(value)


def cmd_get(args: argparse.Namespace, db: sluice.Database) -> int:
    m = db.queue(args.queue).get(wait=args.wait, where=args.where, order_by=args.order_by)
    if m is None:
        emit(args, None, "(no message)")
        return 3
    if args.release:
        m.release()
    else:
        m.ack()
    shown = message_dict(m, state="ready" if args.release else "done")
    emit(args, shown, json.dumps(shown["body"], default=str))
    return 0


def cmd_browse(args: argparse.Namespace, db: sluice.Database) -> int:
    queue = db.queue(args.queue)
    msgs = queue.browse(
        args.limit + 1, state=args.state, where=args.where, order_by=args.order_by,
        after=args.after,
    )  # fmt: skip
    more, msgs = msgs[args.limit :], msgs[: args.limit]
    rows = [message_dict(m) | {"position": str(m.position)} for m in msgs]
    if args.json:
        emit(args, rows, "")
        return 0
    headers = ["POSITION", "ID", "PRIORITY", "ENQUEUED", "ATTEMPTS", "BODY"]
    cells = [[r["position"], r["id"], r["priority"], r["enqueued_at"][:19], r["attempts"],
              _short(json.dumps(r["body"], default=str))] for r in rows]  # fmt: skip
    if args.state in ("failed", "expired"):
        headers.insert(5, "ERROR")
        for cell, r in zip(cells, rows, strict=True):
            cell.insert(5, _short(r["error"] or "", 60))
    print(table(headers, cells, empty=f"(no {args.state} messages in {args.queue})"))
    if more:
        left = "more match" if args.where else _more(queue.stats(), args.state, len(rows))
        note(
            f"{left}; the next page: sluice browse {args.queue} --state {args.state} "
            f"--after {rows[-1]['position']}"
        )
    return 0


def _more(stats: dict[str, int], state: str, shown: int) -> str:
    total = stats.get(state, 0) if state != "done" else 0
    return f"{total - shown:,} more" if total > shown else "more"


def _short(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def cmd_stats(args: argparse.Namespace, db: sluice.Database) -> int:
    if args.queue is None:
        return _overview(args, db)
    spec = db.queue(args.queue).spec
    stats = db.queue(args.queue).stats()
    subs = []
    if spec.kind != "queue":
        topic = spec.topic if spec.kind == "subscription" else args.queue
        subs = [s for s in db.subscriptions(topic) if spec.kind == "topic" or s.name == spec.name]
    now = db.clock.now()
    rows = [
        {"subscription": s.name, "topic": s.topic, "where": s.where, "lag": s.lag,
         "lag_seconds": round(s.lag_seconds(now), 3), "held": s.held,
         "backlog": s.backlog, "position": s.position}
        for s in subs
    ]  # fmt: skip
    data: Any = stats | {"paused": spec.paused}
    if spec.kind != "queue":
        data = {"stats": data, "subscriptions": rows}
    text = table(("STATE", "MESSAGES"), list(stats.items()), empty="") + _paused(spec.paused)
    if subs:
        text += "\n\n" + table(
            ("SUBSCRIPTION", "TOPIC", "LAG", "LAG_AGE", "HELD", "BACKLOG", "WHERE"),
            [(s.name, s.topic, s.lag, age(s.lag_seconds(now)), s.held, s.backlog,
              s.where or "-") for s in subs],
            empty="",
        )  # fmt: skip
    emit(args, data, text)
    return 0


def _paused(paused: bool) -> str:
    return "\n(paused: consumers take nothing; sluice resume)" if paused else ""


def cmd_purge(args: argparse.Namespace, db: sluice.Database) -> int:
    gone = db.queue(args.queue).purge(args.state, older_than=args.older_than)
    emit(args, {"purged": gone}, f"purged {gone} {args.state} message(s)")
    return 0


def cmd_recover(args: argparse.Namespace, db: sluice.Database) -> int:
    dead = db.recover()
    emit(args, {"rolled_back_sessions": dead}, f"rolled back sessions: {dead or 'none'}")
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    if args.action == "upgrade":
        before, after = admin.upgrade(args.db)
        text = (
            f"schema upgraded from version {before} to {after}"
            if before != after
            else f"schema is at version {after}, this sluice's; nothing to do"
        )
        emit(args, {"before": before, "after": after}, text)
        return 0
    found, latest = admin.schema_version(args.db)
    emit(args, {"version": found, "code": latest}, f"{found or 'none'} (this sluice: {latest})")
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

        def counts() -> dict[str, int]:
            done = query.recentProgress  # Spark keeps the last hundred or so
            return {"batches": len(done), "processed": sum(p["numInputRows"] for p in done)}

        with Progress(f"sluice pipeline {args.name}", counts, every=args.progress):
            query.awaitTermination()  # until stopped (Ctrl-C) or failed
    progress = query.recentProgress
    batches = len([p for p in progress if p["numInputRows"]])
    # Spark's count: each target's query reads the batch's messages once.
    rows = sum(p["numInputRows"] for p in progress)
    emit(
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
        # "keys add" is the command add of the group keys (GROUPS).
        group, _, command = name.rpartition(" ")
        under = sub
        if group:
            if group not in groups:
                text = GROUPS[group]
                parent = sub.add_parser(group, parents=[common], help=text, description=text)
                groups[group] = parent.add_subparsers(
                    dest="action", required=True, metavar="ACTION", help="what to do"
                )
            under = groups[group]
        p = under.add_parser(command, parents=[common], help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    return add


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice",
        description="sluice message queues. Options such as --db go before or after the "
        "command; docs/cli.md has them all.",
    )
    parser.add_argument("--version", action="version", version=f"sluice {sluice.__version__}")
    add_global_options(parser, after_command=False)
    common = argparse.ArgumentParser(add_help=False)
    add_global_options(common, after_command=True)
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
    p = add("queues", cmd_queues, "list queues with their depths, oldest message and lag")
    p.add_argument("--settings", action="store_true", help="show each queue's settings instead")
    _create_parser(add("create", cmd_create, "create a queue (or, with --topic, a topic)"))
    _subscribe_parser(add("subscribe", cmd_subscribe, "subscribe to a topic (docs/topics.md)"))
    p = add("unsubscribe", cmd_unsubscribe, "end a subscription and drop what it holds")
    p.add_argument("name", help="subscription name")
    _pause_parsers(add)
    p = add("drop", cmd_drop, "drop a queue and its messages")
    p.add_argument("queue", help="queue name")
    _put_parser(add("put", cmd_put, "enqueue a message, or a batch of JSON lines from stdin"))
    p = add("get", cmd_get, "take one message and acknowledge it (exit 3 if none)")
    p.add_argument("queue", help="queue name")
    p.add_argument("--wait", type=float, default=0.0, help="seconds to wait for one")
    p.add_argument("--release", action="store_true", help="give it back instead of acking")
    _selection_options(p)
    p = add("browse", cmd_browse, "show messages without taking them")
    p.add_argument("queue", help="queue name")
    p.add_argument("--limit", type=_positive, default=20, help="at most this many (default 20)")
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
        "queue", nargs="?", help="queue, topic or subscription (none: every queue, as a table)"
    )
    p = add("purge", cmd_purge, "delete kept expired, failed or done messages")
    p.add_argument("queue", help="queue name")
    p.add_argument("state", choices=["expired", "failed", "done"], help="which kept messages")
    p.add_argument("--older-than", type=float, default=0.0, help="only those older (seconds)")
    add("recover", cmd_recover, "roll back sessions whose owners died")
    _pipeline_parser(
        add(
            "pipeline",
            cmd_pipeline,
            "run a queue -> Spark SQL -> queue pipeline (the spark extra)",
        )
    )
    p = add("completion", cmd_completion, "print the shell code that completes sluice's commands")
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="your shell")
    p.set_defaults(needs_db=False)
    for module in (cli_jobs, cli_rules, cli_keys, cli_server, cli_dropbox, cli_tail):
        module.add_commands(add)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return value


def _put_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("queue", help="queue name")
    p.add_argument(
        "body",
        help="the body: JSON if it parses as JSON ('{\"a\": 1}', 42), else text; - reads "
        "standard input (several JSON lines: one message each, in one transaction)",
    )
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--text", action="store_true", help="the body is text even if it is JSON")
    kind.add_argument(
        "--json-body", action="store_true", help="the body must be JSON: an error if it is not"
    )
    p.add_argument(
        "--properties",
        "-p",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a message property (VALUE as JSON if it parses: n=5 is a number); repeatable",
    )
    p.add_argument("--priority", type=int, help="higher first (default 0)")
    p.add_argument("--delay", type=float, default=0.0, help="seconds until visible")
    p.add_argument("--ttl", type=float, help="seconds until it expires")
    p.add_argument("--group", help="taken in order, one transaction at a time, per group")


def cmd_completion(args: argparse.Namespace) -> int:
    """``eval "$(sluice completion bash)"`` in ~/.bashrc completes commands and options."""
    import argcomplete  # noqa: PLC0415  (only this command and completing need it)

    print(argcomplete.shellcode(["sluice"], shell=args.shell))  # type: ignore[attr-defined]
    return 0


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


# Commands that open no Database themselves: they are given the URL (or, as the worker, use
# the app's own Database).
_OWN_DATABASE = ("db", "pipeline", "worker", "completion")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    _complete(parser)
    args = parser.parse_args(argv)
    try:
        configure_logging(args)
        return _dispatch(args)
    except sluice.QueueNotFound as exc:
        print(f"sluice: error: {exc.describe(_create_hint(exc))}", file=sys.stderr)
        return 2
    except sluice.SluiceError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        where = target(args, default=args.db_default)
        args.db, args.target = where.url, where
        return int(args.func(args))
    if args.command == "worker":
        if args.db:
            raise sluice.ConfigurationError(
                f"sluice worker runs on the Database that {args.app} connects to; --db cannot "
                "point it elsewhere: connect to that database in the app (it may read "
                "SLUICE_URL itself)"
            )
        return int(args.func(args))
    where = target(args)
    args.db, args.target = where.url, where
    if getattr(args, "extra", None):  # before the database is opened, or even made
        extras.require(args.extra, f"sluice {args.command}")
    if args.command in _OWN_DATABASE:
        return int(args.func(args))
    path = sqlite_file(where.url)
    new = path is not None and not path.exists()
    with sluice.connect(where.url) as db:
        if new and path is not None:
            _say_new(where, path)
        return int(args.func(args, db))


def _say_new(where: Target, path: Path) -> None:
    """Name the database a command has just created: a typo in ``--db``, or a forgotten
    one, otherwise makes a new empty file where the user's queues are not."""
    how = "no --db or SLUICE_URL given, so " if not where.explicit else ""
    note(f"{how}created a new database {path.resolve()}")


def _create_hint(exc: sluice.QueueNotFound) -> str:
    """How to make what was not found, in the CLI's words."""
    if exc.kind == "topic":
        return f"create it with: sluice create {exc.name} --topic"
    if exc.kind == "subscription":
        return f"subscribe with: sluice subscribe TOPIC {exc.name}"
    return f"create it with: sluice create {exc.name} (sluice queues lists them)"


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (argcomplete), when there is one."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete  # noqa: PLC0415

    argcomplete.autocomplete(parser)


if __name__ == "__main__":
    sys.exit(main())
