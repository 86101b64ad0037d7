"""``Dropbox``: a root of DropboxMQ dropboxes joined to a sluice database, both ways."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from sluice.dropbox.inbound import Inbound
from sluice.dropbox.layout import Box, Layout
from sluice.dropbox.outbound import Outbound
from sluice.dropbox.stats import DropboxStats
from sluice.dropbox.watch import Watcher
from sluice.engine.database import Engine
from sluice.errors import ConfigurationError, SluiceError

__all__ = ["DEFAULT_POLL", "Dropbox", "DropboxStats"]

DEFAULT_POLL = 0.3
"""Seconds between two listings of a dropbox with no event (DropboxMQ's polling interval)."""

log = logging.getLogger("sluice.dropbox")


class Dropbox:
    """The dropboxes under ``root``, fed from and into ``db``'s queues and topics.

    ``consumer_id``: the name this consumer claims files under (``processing/<id>~<name>``),
    and recovers them by after a crash: give each process its own, the same at every
    restart (default: the host's name). ``keep_processed``: move stored files to
    ``processed/`` (else remove them). ``poll``: seconds between listings when no file
    event comes (events never come over NFS).
    """

    def __init__(
        self,
        db: Engine,
        root: str | os.PathLike[str],
        *,
        consumer_id: str | None = None,
        keep_processed: bool = True,
        poll: float = DEFAULT_POLL,
    ) -> None:
        if not poll > 0:
            raise ConfigurationError(f"poll must be a positive number of seconds, not {poll!r}")
        self.db = db
        self.layout = Layout(root)
        self.consumer_id = consumer_id or socket.gethostname()
        self.poll = poll
        self.stats = DropboxStats()
        """What ``run`` has moved so far, for progress lines; files moved to ``error/``
        and written with metadata left out, whoever moved them."""
        self._in = Inbound(db, self.consumer_id, keep_processed=keep_processed,
                           stats=self.stats)  # fmt: skip
        self._out = Outbound(db, self.stats)

    # --- in ---------------------------------------------------------------------------
    def ingest(self, queue: str, limit: int | None = None) -> int:
        """Store up to ``limit`` files dropped in ``<root>/<queue>/incoming/target/`` in
        ``queue``; the number of messages stored (expired and refused files are moved,
        not counted)."""
        self._check(queue)
        return self._in.ingest(self.layout.queue(queue), queue, limit)

    def ingest_topic(self, topic: str, limit: int | None = None) -> int:
        """Publish up to ``limit`` files dropped in the topic's ``.incoming/target/``."""
        self._check(topic, topic=True)
        return self._in.ingest(self.layout.topic_incoming(topic), topic, limit)

    def recover(self, queue: str) -> int:
        """Store, exactly once, what this consumer left in ``queue``'s ``processing/``
        when it stopped; the number of messages stored now."""
        self._check(queue)
        return self._in.recover(self.layout.queue(queue), queue)

    def recover_topic(self, topic: str) -> int:
        """``recover`` for a topic's ``.incoming/``."""
        self._check(topic, topic=True)
        return self._in.recover(self.layout.topic_incoming(topic), topic)

    # --- out --------------------------------------------------------------------------
    def emit(self, queue: str, limit: int | None = None) -> int:
        """Write up to ``limit`` of ``queue``'s messages into its ``target/``; how many.
        Files there past their expiration go to ``expired/`` first."""
        self._check(queue)
        box = self.layout.queue(queue)
        self._out.expire(box)
        return self._out.emit(queue, box, limit)

    def emit_topic(self, topic: str, limit: int | None = None) -> int:
        """Write each subscription's messages of ``topic`` into its own directory,
        ``.subscriptions/<subscription>/target/``; how many files (up to ``limit`` per
        subscription)."""
        total = 0
        for subscription in self.db.subscriptions(topic):
            box = self.layout.subscription(topic, subscription.name)
            self._out.expire(box)
            total += self._out.emit(subscription.name, box, limit)
        return total

    # --- running ----------------------------------------------------------------------
    def run(
        self,
        *,
        inbound: Sequence[str] = (),
        outbound: Sequence[str] = (),
        topics_in: Sequence[str] = (),
        topics_out: Sequence[str] = (),
        stop: threading.Event,
        events: bool = True,
    ) -> None:
        """Move files in and messages out until ``stop`` is set.

        First recovers what this consumer left in ``processing/``; then stores files
        as they arrive (woken by file events, and every ``poll`` seconds anyway) and
        writes messages as they are committed (woken by the queue). A failure is
        logged and retried after ``poll`` seconds. ``events=False`` only polls.
        """
        # A topic may be both (DropboxMQ's topic distributor): its files come in through
        # .incoming/ and go out through .subscriptions/. A queue has one target/.
        both = set(inbound) & set(outbound)
        if both:
            raise ConfigurationError(
                f"{sorted(both)} cannot be both inbound and outbound: its files would come "
                "straight back in; use two queues"
            )
        self._check_exist(inbound, outbound, topics_in, topics_out)
        # Every box is made (and checked for links) here, before any thread starts: a
        # link met now is the caller's DropboxError, not a thread's silent death.
        boxes = [(self.layout.queue(q), q) for q in inbound]
        boxes += [(self.layout.topic_incoming(t), t) for t in topics_in]
        out_boxes = [(self.layout.queue(q), q) for q in outbound]
        threads = [threading.Thread(target=self._inbound_loop, args=(boxes, stop, events))]
        threads += [
            threading.Thread(target=self._outbound_loop, args=(q, box, stop))
            for box, q in out_boxes
        ]
        threads += [threading.Thread(target=self._topic_loop, args=(t, stop)) for t in topics_out]
        for thread in threads:
            thread.name = "sluice-dropbox"
            thread.start()
        for thread in threads:
            thread.join()

    def _check(self, name: str, *, topic: bool = False) -> None:
        """DropboxError for a name that cannot be a directory, then QueueNotFound for one
        that is no queue: both before any directory is made."""
        self.layout.check(name, topic=topic)
        self.db.context.spec(name)

    def _check_exist(
        self,
        inbound: Sequence[str],
        outbound: Sequence[str],
        topics_in: Sequence[str],
        topics_out: Sequence[str],
    ) -> None:
        """QueueNotFound (with the names closest to it) before anything starts: a misspelt
        queue would otherwise take its first file into processing/ and fail there."""
        context = self.db.context
        for name in [*inbound, *outbound]:
            context.spec(name)
        for name in [*topics_in, *topics_out]:
            kind = context.spec(name).kind
            if kind != "topic":
                raise ConfigurationError(
                    f"{name!r} is a {kind}, not a topic: give it as a queue (inbound/outbound)"
                )

    def _inbound_loop(
        self, boxes: list[tuple[Box, str]], stop: threading.Event, events: bool
    ) -> None:
        if not boxes:
            return
        for box, destination in boxes:
            self.stats.add("stored", self._guarded(stop, self._in.recover, box, destination))
        watcher = Watcher([b.dir("target") for b, _ in boxes], poll=self.poll, events=events)
        try:
            while not stop.is_set():
                for box, destination in boxes:
                    stored = self._guarded(stop, self._in.ingest, box, destination, None)
                    self.stats.add("stored", stored)
                watcher.wait(stop)
        finally:
            watcher.close()

    def _outbound_loop(self, queue: str, box: Box, stop: threading.Event) -> None:
        while not stop.is_set():
            self._guarded(stop, self._out.expire, box)
            written = self._guarded(stop, self._out.emit, queue, box, None, self.poll)
            self.stats.add("written", written)

    def _topic_loop(self, topic: str, stop: threading.Event) -> None:
        while not stop.is_set():
            written = self._guarded(stop, self.emit_topic, topic)
            self.stats.add("written", written)
            if not written:
                stop.wait(self.poll)

    def _guarded(self, stop: threading.Event, work: Callable[..., int], *args: Any) -> int:
        try:
            return work(*args)
        except (SluiceError, OSError):
            self.stats.add("failures", 1)
            log.exception("sluice.dropbox: retrying in %s s", self.poll)
            stop.wait(self.poll)
            return 0
