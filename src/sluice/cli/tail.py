"""``sluice tail``: follow a queue live, as ``tail -f`` follows a file; nothing is taken.

Each message that becomes ready is printed once, in the order it was enqueued, from the
time the command starts (``--from-start``: the ready messages already there first). It
waits with the Database's wake-ups (another process's commit on SQLite is seen at the
poll interval), never by re-reading the queue in a loop.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from collections import deque
from types import FrameType

import sluice
from sluice.cli.options import Adder
from sluice.cli.output import emit, message_dict, note

__all__ = ["add_commands"]

_PAGE = 500
_SEEN = 10_000  # ids remembered to print each message once among those enqueued at one time


def cmd_tail(args: argparse.Namespace, db: sluice.Database) -> int:
    queue = db.queue(args.queue)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        db.context.wakeups.notify(args.queue)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    since = float("-inf") if args.from_start else db.clock.now()
    seen: deque[str] = deque(maxlen=_SEEN)
    shown = 0
    note(f"following {args.queue} (Ctrl-C to stop)")
    while not stop.is_set():
        token = db.context.wakeups.token()
        where = "enqueued_at >= " + repr(since) if since != float("-inf") else None
        if args.where:
            where = f"({args.where})" + (f" AND {where}" if where else "")
        page = queue.browse(_PAGE, where=where, order_by=["enqueued_at"])
        fresh = [m for m in page if m.id not in seen]
        for m in fresh:
            seen.append(m.id)
            data = message_dict(m)
            emit(args, data, f"{data['enqueued_at'][:19]}  {m.id}  "
                 + json.dumps(data["body"], default=str))  # fmt: skip
            shown += 1
            if args.count and shown >= args.count:
                return 0
        if page:
            since = max(since, page[-1].enqueued_at.timestamp())
        if len(page) < _PAGE or not fresh:
            db.context.wakeups.wait(token, args.poll, args.queue)
    return 0


def add_commands(add: Adder) -> None:
    p = add("tail", cmd_tail, "follow a queue live: print each new message, take none")
    p.add_argument("queue", help="queue or topic name")
    p.add_argument("--where", help="only messages this expression holds for")
    p.add_argument(
        "--from-start", action="store_true", help="first the ready messages already there"
    )
    p.add_argument("-n", "--count", type=int, help="stop after this many messages")
    p.add_argument(
        "--poll", type=float, default=1.0, help="longest wait between looks (default 1 s)"
    )
