"""``sluice queues | create | subscribe | unsubscribe | pause | resume | drop | stats |
purge | recover``: the queues, topics and subscriptions of a database, and their upkeep."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

import sluice
from sluice.catalog import ISOLATION_LEVELS, Durability
from sluice.cli.options import Adder
from sluice.cli.output import age, emit, table
from sluice.engine.topics import Start
from sluice.message import Position

__all__ = ["add_commands"]


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


def add_commands(add: Adder) -> None:
    p = add("queues", cmd_queues, "list queues with their depths, oldest message and lag")
    p.add_argument("--settings", action="store_true", help="show each queue's settings instead")
    _create_parser(add("create", cmd_create, "create a queue (or, with --topic, a topic)"))
    _subscribe_parser(add("subscribe", cmd_subscribe, "subscribe to a topic (docs/topics.md)"))
    p = add("unsubscribe", cmd_unsubscribe, "end a subscription and drop what it holds")
    p.add_argument("name", help="subscription name")
    _pause_parsers(add)
    p = add("drop", cmd_drop, "drop a queue and its messages")
    p.add_argument("queue", help="queue name")
    p = add("stats", cmd_stats, "count a queue's messages by state; subscriptions' lag")
    p.add_argument(
        "queue", nargs="?", help="queue, topic or subscription (none: every queue, as a table)"
    )
    p = add(
        "purge", cmd_purge, "delete ready (and delayed) messages, or kept expired, failed or done"
    )
    p.add_argument("queue", help="queue or subscription name")
    p.add_argument(
        "state",
        choices=["ready", "expired", "failed", "done"],
        help="ready: every one not yet delivered (held ones stay); or which kept ones",
    )
    p.add_argument("--older-than", type=float, default=0.0, help="only kept ones older (seconds)")
    add("recover", cmd_recover, "roll back sessions whose owners died")


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
