"""``sluice dropbox``: DropboxMQ dropbox directories joined to queues and topics
(docs/dropbox.md)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

import sluice
from sluice.cli.options import Adder, Progress, add_progress_option
from sluice.dropbox import DEFAULT_POLL, Dropbox

__all__ = ["add_commands"]


def cmd_dropbox(args: argparse.Namespace, db: sluice.Database) -> int:
    # Checked before any directory is made (Dropbox.run checks again): a misspelt --in
    # would otherwise make a dropbox whose files could never be stored.
    for name in [*args.inbound, *args.outbound]:
        db.queue(name)
    for name in [*args.topic_in, *args.topic_out]:
        if db.queue(name).spec.kind != "topic":
            raise sluice.ConfigurationError(
                f"{name!r} is a {db.queue(name).spec.kind}, not a topic: give it with --in/--out"
            )
    box = Dropbox(
        db,
        args.root,
        consumer_id=args.consumer_id,
        keep_processed=not args.remove_processed,
        poll=args.poll,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(
        f"sluice dropbox: {box.layout.root} as consumer {box.consumer_id!r}; SIGTERM or "
        "Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    with Progress("sluice dropbox", box.stats.as_dict, every=args.progress, rate_of="stored"):
        box.run(
            inbound=args.inbound,
            outbound=args.outbound,
            topics_in=args.topic_in,
            topics_out=args.topic_out,
            stop=stop,
            events=not args.poll_only,
        )
    return 0


def add_commands(add: Adder) -> None:
    p = add("dropbox", cmd_dropbox, "move files of dropbox directories in and out of queues")
    p.add_argument("--root", required=True, help="the directory holding the dropboxes")
    add_progress_option(p)
    p.add_argument(
        "--in",
        dest="inbound",
        action="append",
        default=[],
        metavar="QUEUE",
        help="store files dropped in <root>/QUEUE/incoming/target (repeatable)",
    )
    p.add_argument(
        "--out",
        dest="outbound",
        action="append",
        default=[],
        metavar="QUEUE",
        help="write QUEUE's messages into <root>/QUEUE/incoming/target (repeatable)",
    )
    p.add_argument(
        "--topic-in",
        action="append",
        default=[],
        metavar="TOPIC",
        help="publish files dropped in the topic's .incoming/target (repeatable)",
    )
    p.add_argument(
        "--topic-out",
        action="append",
        default=[],
        metavar="TOPIC",
        help="write each subscription's messages into .subscriptions/<name> (the same "
        "topic may be given with --topic-in: DropboxMQ's topic distributor)",
    )
    p.add_argument(
        "--consumer-id",
        help="the name files are claimed under, the same at every "
        "restart (default: the host's name)",
    )
    p.add_argument(
        "--remove-processed",
        action="store_true",
        help="remove stored files instead of moving them to processed/",
    )
    p.add_argument(
        "--poll",
        type=float,
        default=DEFAULT_POLL,
        help="seconds between listings with no file event (default %(default)s)",
    )
    p.add_argument(
        "--poll-only",
        action="store_true",
        help="no file events, only listings (network file systems)",
    )
