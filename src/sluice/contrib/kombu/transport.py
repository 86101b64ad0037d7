"""The kombu transport: broker URLs ``sluice+<sluice URL>`` (``sluice+sqlite:///…``,
``sluice+postgresql://…``, ``sluice+memory://``).

On kombu's event loop (Celery's worker) a connection's messages are claimed and
acknowledged by a consumer process it starts (sluice.contrib.kombu.consumer_process;
``consumer_process=False``: by threads of its own); ``drain_events`` takes them itself.
Every kombu connection of a process to one URL shares one ``sluice.Database``
(a ``memory://`` database is visible to all of them, as kombu's memory transport
is), opened on the first connection and closed when the process exits; a forked
child opens its own. Consumers wait by sluice's wake-ups for any of the queues
they consume, so a message published in another process is delivered when its
commit lands, not at the next poll.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
import time
from typing import Any

from kombu.transport import virtual

import sluice
from sluice.contrib.kombu.acker import Acker
from sluice.contrib.kombu.bindings import Bindings
from sluice.contrib.kombu.channel import Channel
from sluice.contrib.kombu.consumer_process import ConsumerProcess
from sluice.contrib.kombu.reader import Reader

__all__ = ["Transport"]

DRAIN_BATCH = 64
"""The most messages one ``drain_events`` delivers (each within its consumer's prefetch)."""

_open: dict[tuple[int, str], tuple[sluice.Database, Bindings]] = {}
_open_lock = threading.Lock()


def _database(url: str) -> tuple[sluice.Database, Bindings]:
    key = (os.getpid(), url)
    with _open_lock:
        found = _open.get(key)
        if found is None:
            db = sluice.connect(url)
            try:
                found = _open[key] = (db, Bindings(db))
            except BaseException:
                db.close()
                raise
        return found


def _flag(value: Any) -> bool:
    """A transport option's truth: a bool, or a word from a URL's query string."""
    if isinstance(value, str):
        if value.lower() not in {"true", "false", "1", "0", "yes", "no", "on", "off"}:
            raise sluice.ConfigurationError(f"expected true or false, not {value!r}")
        return value.lower() in {"true", "1", "yes", "on"}
    return bool(value)


@atexit.register
def _close_all() -> None:
    with _open_lock:
        mine = [key for key in _open if key[0] == os.getpid()]
        for key in mine:
            _open.pop(key)[0].close()


class Transport(virtual.Transport):  # type: ignore[misc]
    """kombu's virtual transport on sluice queues (docs/celery.md)."""

    Channel = Channel
    can_parse_url = True
    driver_type = "sluice"
    driver_name = "sluice"
    # Asynchronous: Celery's worker runs its event loop (and a prefork pool that never
    # blocks it) over the consumer process's socket (sluice.contrib.kombu.consumer_process)
    # or the reader's pipe (sluice.contrib.kombu.reader).
    implements = virtual.Transport.implements.extend(
        asynchronous=True, exchange_type=frozenset(["direct", "topic", "fanout"])
    )
    connection_errors = (*virtual.Transport.connection_errors, sluice.ConnectionLost)
    channel_errors = (*virtual.Transport.channel_errors, sluice.SluiceError)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        options = client.transport_options or {}
        # Settings for the queues kombu declares: max_attempts, error_queue, retention...
        self.queue_options: dict[str, Any] = dict(options.get("queue_options") or {})
        self._url: str = client.hostname or ""
        self._database: tuple[sluice.Database, Bindings] | None = None
        self._turn = itertools.count()
        self._settled = threading.Event()
        self._reader: Reader | None = None
        self._pid = os.getpid()
        # Acks commit on a thread of their own, those that pile up together (one fsync);
        # False: in the caller's thread, the ack durable when kombu's ack returns.
        self._background_acks = _flag(options.get("background_acks", True))
        self._acker: Acker | None = None
        self._acker_lock = threading.Lock()
        # On kombu's event loop (Celery's worker), claims and acks in a process of their
        # own (sluice.contrib.kombu.sidecar), off this process's GIL: the worker's main
        # process is a no-op task's bound. False: the reader and ack threads, in-process.
        # A memory:// database lives in this process only: it keeps the reader thread.
        # Its acks are batched in its own thread: not for who asked for acks committed in
        # the caller's thread.
        consumer_process = _flag(options.get("consumer_process", self._background_acks))
        if consumer_process and not self._background_acks:
            raise sluice.ConfigurationError(
                "transport options consumer_process=True and background_acks=False conflict: "
                "the consumer process commits acks in a thread of its own; set "
                "consumer_process=False for acks committed before kombu's ack() returns"
            )
        self._use_consumer_process = consumer_process and not self._url.startswith("memory:")
        self._consumer_process: ConsumerProcess | None = None

    def _opened(self) -> tuple[sluice.Database, Bindings]:
        if self._database is None:
            if not self._url or "://" not in self._url:
                raise sluice.ConfigurationError(
                    f"sluice broker URL {self._url!r}: expected sluice+<sluice URL>, such as "
                    "sluice+sqlite:///celery.db or sluice+postgresql://host/db"
                )
            self._database = _database(self._url)
        return self._database

    @property
    def broker_url(self) -> str:
        """The sluice URL (the broker URL without ``sluice+``)."""
        return self._url

    @property
    def database(self) -> sluice.Database:
        return self._opened()[0]

    @property
    def bindings(self) -> Bindings:
        return self._opened()[1]

    def establish_connection(self) -> Any:
        self._opened()  # a URL that cannot be opened fails here, as kombu expects
        return super().establish_connection()

    def driver_version(self) -> str:
        return sluice.__version__

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        """Deliver what the queues consumed on this connection have ready, as much as
        the consumers' prefetch allows (at most ``DRAIN_BATCH``); if none is ready,
        wait up to ``timeout`` seconds (None: until one comes) by sluice's wake-ups."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delivered = 0
        while delivered < DRAIN_BATCH:
            owners = self.consuming()
            remaining = 3600.0 if deadline is None else deadline - time.monotonic()
            if owners:
                # After the first, only what is ready now.
                wait = 0.0 if delivered else max(remaining, 0.0)
                taken = self._take(owners, DRAIN_BATCH - delivered, wait)
                if taken:
                    delivered += taken
                    continue
                if delivered:
                    return
            elif delivered:
                return
            elif remaining > 0:
                # Every consumer's prefetch is full: wait for one of its settles.
                self._settled.clear()
                self._settled.wait(min(remaining, 1.0))
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError()

    def consuming(self) -> dict[str, Any]:
        """Each queue consumed by a channel with prefetch room, and that channel."""
        owners: dict[str, Any] = {}
        for channel in self.channels:
            if channel._consumers and channel.qos.can_consume():
                for queue in channel._active_queues:
                    owners.setdefault(queue, channel)
        return owners

    def _take(self, owners: dict[str, Any], most: int, wait: float) -> int:
        """Take and deliver up to ``most`` messages, as many as the consumer with the
        least prefetch room may have, in one claim; how many came within ``wait``."""
        rooms = [c.qos.can_consume_max_estimate() for c in set(owners.values())]
        limit = min([most, *(r for r in rooms if r is not None)])
        taken = self.take_payloads(owners, max(limit, 1), wait)
        for handed in taken:
            if handed is not True and handed is not False:
                self._deliver(*handed)
        return len(taken)

    def take_payload(
        self, owners: dict[str, Any], wait: float, until: threading.Event | None = None
    ) -> tuple[dict[str, Any], str] | bool:
        """The next message of the consumed queues as (payload, queue), held by the
        channel that consumes it (settled at once if that consumer does not
        acknowledge); False if none came, True if one came that was not kombu's."""
        taken = self.take_payloads(owners, 1, wait, until)
        return taken[0] if taken else False

    def take_payloads(
        self,
        owners: dict[str, Any],
        limit: int,
        wait: float,
        until: threading.Event | None = None,
    ) -> list[tuple[dict[str, Any], str] | bool]:
        """Up to ``limit`` messages of the consumed queues, as ``take_payload`` gives
        each (True for one that was not kombu's); [] if none came."""
        queues = list(owners)
        turn = next(self._turn) % len(queues)  # each queue first in its turn
        queues = queues[turn:] + queues[:turn]
        first: Channel = owners[queues[0]]
        handed: list[tuple[dict[str, Any], str] | bool] = []
        for message in first.take_many(queues, limit=limit, wait=wait, until=until):
            queue = first.queue_of(message)
            owner: Channel = owners.get(queue, first)
            if queue in owner._no_ack:
                message.ack()
                payload = owner.payload(message, keep=False)
            else:
                payload = owner.payload(message, keep=True)
            handed.append(True if payload is None else (payload, queue))
        return handed

    def deliver(self, payload: dict[str, Any], queue: str) -> None:
        """Hand ``payload`` to the consumer of ``queue`` (kombu's ``_deliver``)."""
        self._deliver(payload, queue)

    def give_back(self, payload: dict[str, Any]) -> None:
        """Release a message taken for delivery and never delivered."""
        tag = payload["properties"]["delivery_tag"]
        for channel in self.channels:
            channel.settle(tag, "release")

    # --- kombu's event loop (Celery's worker) --------------------------------------
    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        if self._use_consumer_process:
            if self._consumer_process is None:
                self._consumer_process = ConsumerProcess(self, loop)
            self._consumer_process.refresh()  # started with the first consumer
            return
        if self._reader is None:
            self._reader = Reader(self)
        loop.add_reader(self._reader.fd, self._reader.on_readable)

    def unregister_from_event_loop(self, connection: Any, loop: Any) -> None:
        if self._reader is not None:
            loop.remove(self._reader.fd)
            self._stop_reader()
        self._stop_consumer_process()

    def _stop_consumer_process(self) -> None:
        consumer_process, self._consumer_process = self._consumer_process, None
        if consumer_process is not None and os.getpid() == self._pid:
            consumer_process.stop()

    def settle_elsewhere(self, tag: str, how: str) -> None:
        """Settle ``tag`` if this transport's consumer process holds it (a channel does
        not): ``ack``, ``release`` or ``reject``."""
        consumer_process = self._consumer_process
        if consumer_process is not None:
            consumer_process.settle(tag, how)

    def _stop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and os.getpid() == self._pid:
            reader.stop()

    @property
    def acker(self) -> Acker | None:
        """The thread acks commit on (None: in the caller's thread)."""
        if not self._background_acks:
            return None
        with self._acker_lock:
            if self._acker is None:
                self._acker = Acker(self.database)
            return self._acker

    def close_connection(self, connection: Any) -> None:
        self._stop_reader()
        super().close_connection(connection)  # the channels give back what they hold
        self._stop_consumer_process()  # after them: their releases go through it
        with self._acker_lock:
            acker, self._acker = self._acker, None
        if acker is not None and os.getpid() == self._pid:
            acker.close()  # every ack committed before the close returns

    def settled(self) -> None:
        """A consumer settled a message: whoever waits for prefetch room looks again."""
        self._settled.set()
        reader = self._reader
        if reader is not None:
            reader.look_again.set()

    def consumers_changed(self) -> None:
        """A channel consumes other queues, or has another prefetch count."""
        self.settled()
        if self._consumer_process is not None:
            self._consumer_process.refresh()


def close_databases() -> None:
    """Close the databases this process's kombu connections share (tests; a ``memory://``
    broker starts empty again). Connections still open must not be used afterwards."""
    _close_all()
