"""``sluice put``, ``get`` and ``browse``: messages from the command line, bodies as JSON when
they parse as JSON, standard input as a batch of JSON lines, pages that say there is more."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

import sluice
from sluice.cli.options import Adder
from sluice.cli.output import emit, message_dict, note, table

__all__ = ["add_commands", "selection_options"]


def selection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--where", help="only messages this expression holds for (docs/expressions.md)")
    p.add_argument(
        "--order-by",
        action="append",
        metavar="KEY",
        help="order by this expression first ('body.total DESC'); repeatable",
    )


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


def add_commands(add: Adder) -> None:
    _put_parser(add("put", cmd_put, "enqueue a message, or a batch of JSON lines from stdin"))
    p = add("get", cmd_get, "take one message and acknowledge it (exit 3 if none)")
    p.add_argument("queue", help="queue name")
    p.add_argument("--wait", type=float, default=0.0, help="seconds to wait for one")
    p.add_argument("--release", action="store_true", help="give it back instead of acking")
    selection_options(p)
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
    selection_options(p)
