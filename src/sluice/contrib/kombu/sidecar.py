"""The consumer process: a worker's claims and acknowledgements, in a process of their own.

A Celery worker's main process is one interpreter: its event loop, the transport's
reader (claims) and its acker (commits) share one GIL, and the transport's part is a
third of the worker's CPU per task. Here that part runs in a process the worker starts
(``python -m sluice.contrib.kombu.sidecar FD``, sluice.contrib.kombu.consumer_process):
its own ``sluice.connect`` holds the messages it takes, within each consumer's prefetch
as the worker reports it, and sends them as ready kombu payloads over the socket ``FD``;
the worker sends back settles by delivery tag. Its session is the messages' holder, so
when it exits (or is killed) what it holds goes back to its queues at once. It stops
when the worker says so or when the worker's end of the socket closes (the worker died):
it commits the acknowledgements it was sent, closes its database, and exits.

Frames (sluice.contrib.kombu.wire), worker to this process: ``("hello", url)`` first;
``("consumers", [(cid, prefetch, queues, no_ack_queues, elsewhere), ...])`` whenever they
change (``elsewhere``: messages of that consumer still unsettled but not held here);
``("ack" | "release" | "reject", tag)``; ``("stop",)``. This process to the worker:
``("deliver", [(cid, tag, queue, payload), ...])`` and ``("log", level, text)``.
"""

from __future__ import annotations

import itertools
import logging
import signal
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import sluice
from sluice.contrib.kombu.acker import Acker
from sluice.contrib.kombu.channel import settle_held
from sluice.contrib.kombu.names import from_sluice
from sluice.contrib.kombu.payloads import as_payload, delivery_tag
from sluice.contrib.kombu.wire import Frames, frame, read_frame

__all__ = ["main"]

log = logging.getLogger("sluice.contrib.kombu")

_IDLE = 1.0  # the longest wait for a message before looking at the consumers again
_BATCH = 64  # the most messages sent in one frame
_ROOM_WAIT = 0.05  # how long a full consumer's settles are awaited before the others' queues
_LINGER = 0.002  # the longest wait for more room before a claim, when settles come that fast


@dataclass
class _Consumer:
    """One of the worker's channels that consume, as its last report said."""

    prefetch: int  # 0: no limit
    queues: list[str]  # sluice names, in the channel's order
    no_ack: frozenset[str]
    elsewhere: int  # unsettled messages of it not held by this process
    held: int = 0

    def room(self) -> int:
        # Each settle makes room at once: with Celery's prefetch multiplier at 1 a pool
        # process would otherwise stand idle until others finish.
        if not self.prefetch:
            return _BATCH
        return self.prefetch - self.held - self.elsewhere

    def batch(self) -> int:
        """The room worth one claim while the worker still holds messages: half the
        prefetch (a claim is a round trip and a transaction, whatever it takes)."""
        return max(1, self.prefetch // 2) if self.prefetch else 1


class _Link:
    """The socket to the worker: frames sent whole from any thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> bool:
        """Send ``message``; False if the worker is gone."""
        data = frame(message)
        with self._lock:
            try:
                self.sock.sendall(data)
            except OSError:
                return False
        return True


class _Forward(logging.Handler):
    """Records of this process (the acker's LeaseLost warnings, say) logged by the worker,
    in its log, under the same logger."""

    def __init__(self, link: _Link) -> None:
        super().__init__()
        self._link = link

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # a record that cannot be formatted must not end the process
            self.handleError(record)
            return
        self._link.send(("log", record.levelno, text))


class Sidecar:
    """The taker thread, the acker, and the settles read from the worker."""

    def __init__(self, db: sluice.Database, link: _Link) -> None:
        self._db = db
        self._link = link
        self._acker = Acker(db)
        self._consumers: dict[int, _Consumer] = {}
        self._held: dict[str, tuple[sluice.Message, int]] = {}
        self._lock = threading.Lock()  # the consumers and what is held for them
        self._turn = itertools.count()
        self._settled_at = time.monotonic()
        self._gap = _LINGER  # the time between two settles, smoothed
        self.look_again = threading.Event()
        self._stopping = threading.Event()
        self._taker = threading.Thread(target=self._take, name="sluice-kombu-taker", daemon=True)

    def serve(self) -> None:
        """Take and settle until the worker says stop or goes away."""
        self._taker.start()
        frames = Frames()
        try:
            # As much as has come in one read: settles come one frame each, many at a time.
            while data := _receive(self._link.sock):
                for message in frames.feed(data):
                    kind = message[0]
                    if kind == "stop":
                        return
                    if kind == "consumers":
                        self._update(message[1])
                    else:
                        self._settle(message[1], kind)
        finally:
            self._stop()

    def _update(self, reported: list[tuple[int, int, list[str], list[str], int]]) -> None:
        with self._lock:
            # Counted afresh: a channel that stopped consuming for a while still holds
            # what it was sent until it settles.
            held = Counter(cid for _, cid in self._held.values())
            self._consumers = {
                cid: _Consumer(prefetch, queues, frozenset(no_ack), elsewhere, held[cid])
                for cid, prefetch, queues, no_ack, elsewhere in reported
            }
        self.look_again.set()

    def _settle(self, tag: str, how: str) -> None:
        with self._lock:
            found = self._held.pop(tag, None)
            if found is None:
                return  # settled already, or never taken here
            message, cid = found
            now = time.monotonic()
            self._gap += (min(now - self._settled_at, _IDLE) - self._gap) / 8
            self._settled_at = now
            consumer = self._consumers.get(cid)
            if consumer is not None:
                had_room = consumer.room() > 0
                consumer.held -= 1
                # The taker looks again only when this consumer can take again, or has
                # room for a whole batch: a look at every settle would be a transaction
                # each (on the remote-control queue, say) that finds nothing.
                if (not had_room and consumer.room() > 0) or consumer.room() == consumer.batch():
                    self.look_again.set()
        if how == "ack":
            self._acker.ack(message)  # with whatever else piles up: one commit
        else:
            try:
                settle_held(message, how)
            except sluice.SluiceError:
                log.exception("message %s of %r could not be settled (%s)", message.id,
                              message.queue, how)  # fmt: skip

    def _owners(self) -> tuple[dict[str, int], int, bool, bool]:
        """Each consumed queue and the consumer with room it goes to; how many may be
        taken now (the least room among them, so none overflows); whether a consumer
        that holds messages has no room (a settle gives it some); whether one has less
        room than a batch while settles come fast enough to add some within _LINGER."""
        owners: dict[str, int] = {}
        least = _BATCH
        full = short = False
        with self._lock:
            for cid, consumer in self._consumers.items():
                room = consumer.room()
                if room > 0:
                    least = min(least, room)
                    for queue in consumer.queues:
                        owners.setdefault(queue, cid)
                    # Worth waiting for when two settles or more come within _LINGER.
                    if consumer.held and room < consumer.batch() and self._gap * 2 <= _LINGER:
                        short = True
                elif consumer.held:
                    full = True
        return owners, least, full, short

    def _take(self) -> None:
        while not self._stopping.is_set():
            self.look_again.clear()
            owners, limit, full, short = self._owners()
            if full and self.look_again.wait(_ROOM_WAIT):
                # A busy worker's consumer has room again within a few tasks: then every
                # queue is looked at in one claim. Looking at the others alone meanwhile
                # (Celery's remote-control queue, mostly empty) would be a transaction or
                # two per batch that find nothing.
                continue
            if short:
                # Settles come fast and the worker still has messages to start: a claim
                # of a batch costs what a claim of one does (a round trip, a transaction,
                # a frame), so the next few settles are awaited, never past _LINGER.
                self.look_again.wait(_LINGER)
                owners, limit, full, short = self._owners()
            if not owners:
                self.look_again.wait(_IDLE)
                continue
            queues = list(owners)
            turn = next(self._turn) % len(queues)  # each queue first in its turn
            queues = queues[turn:] + queues[:turn]
            try:
                taken = self._claim(queues, limit)
                batch = self._hold(taken, owners, queues[0])
            except sluice.SluiceError:
                log.exception("sluice kombu consumer process: taking failed; trying again")
                self._stopping.wait(_IDLE)
                continue
            if batch and not self._link.send(("deliver", batch)):
                return  # the worker is gone: what was taken goes back at the close

    def _claim(self, queues: list[str], limit: int) -> list[sluice.Message]:
        try:
            return self._db.get_many(queues, limit=limit, wait=_IDLE, until=self.look_again)
        except sluice.QueueNotFound:
            # A queue consumed but not (or no longer) declared: nothing in it yet.
            queues = [q for q in queues if _exists(self._db, q)]
            if not queues:
                self.look_again.wait(_IDLE)
                return []
            return self._db.get_many(queues, limit=limit, wait=_IDLE, until=self.look_again)

    def _hold(
        self, taken: list[sluice.Message], owners: dict[str, int], first: str
    ) -> list[tuple[int, str, str, dict[str, Any]]]:
        """The deliveries of ``taken``: each held for its consumer, or settled at once for
        a consumer without acknowledgement."""
        batch = []
        settled_now = []
        with self._lock:
            for message in taken:
                cid = owners.get(message.queue, owners[first])
                consumer = self._consumers.get(cid)
                no_ack = consumer is not None and message.queue in consumer.no_ack
                payload = as_payload(message, held=True)
                if payload is None:
                    continue  # not kombu's: rejected
                tag = delivery_tag(message)
                if no_ack:
                    settled_now.append(message)
                else:
                    self._held[tag] = (message, cid)
                    if consumer is not None:
                        consumer.held += 1
                batch.append((cid, tag, from_sluice(message.queue), payload))
        if settled_now:
            # Remote control's queues (Celery's pidbox): settled before they are sent, as
            # a consumer without acknowledgement expects.
            for message, error in zip(settled_now, self._db.ack_many(settled_now), strict=True):
                if error is not None:
                    log.warning("message %s of %r: %s", message.id, message.queue, error)
        return batch

    def _stop(self) -> None:
        """End the taker, commit the acknowledgements sent, and end the session: what it
        still holds goes back to its queues at once."""
        self._stopping.set()
        self.look_again.set()
        self._taker.join()
        self._acker.close()
        self._db.close()


def _receive(sock: socket.socket) -> bytes:
    """What the worker sent, as much as there is; b"" once it is gone."""
    try:
        return sock.recv(1 << 18)
    except OSError:  # reset: the worker is gone
        return b""


def _exists(db: sluice.Database, name: str) -> bool:
    try:
        db.queue(name)
    except sluice.QueueNotFound:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """``python -m sluice.contrib.kombu.sidecar FD``: serve the worker on the socket FD."""
    args = sys.argv[1:] if argv is None else argv
    # A Ctrl-C at the terminal or a service manager's SIGTERM reaches the whole process
    # group: the worker then shuts down warm, sends its last acks, and stops this process
    # itself (or dies, and this process sees its socket end). Dying first would drop them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=int(args[0]))
    link = _Link(sock)
    root = logging.getLogger()
    root.addHandler(_Forward(link))
    root.setLevel(logging.INFO)
    hello = read_frame(sock)
    if hello is None or hello[0] != "hello":
        return 0  # the worker went away before it said anything
    try:
        db = sluice.connect(hello[1])
    except sluice.SluiceError:
        log.exception("sluice kombu consumer process: cannot open the broker")
        return 1
    Sidecar(db, link).serve()
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
