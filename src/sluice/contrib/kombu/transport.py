"""The kombu transport: broker URLs ``sluice+<sluice URL>`` (``sluice+sqlite:///…``,
``sluice+postgresql://…``, ``sluice+memory://``).

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
from sluice.contrib.kombu.bindings import Bindings
from sluice.contrib.kombu.channel import Channel

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
    implements = virtual.Transport.implements.extend(
        asynchronous=False, exchange_type=frozenset(["direct", "topic", "fanout"])
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
            owners = self._consuming()
            remaining = 3600.0 if deadline is None else deadline - time.monotonic()
            if owners:
                # After the first, only what is ready now.
                wait = 0.0 if delivered else max(remaining, 0.0)
                if self._take(owners, wait):
                    delivered += 1
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

    def _consuming(self) -> dict[str, Any]:
        """Each queue consumed by a channel with prefetch room, and that channel."""
        owners: dict[str, Any] = {}
        for channel in self.channels:
            if channel._consumers and channel.qos.can_consume():
                for queue in channel._active_queues:
                    owners.setdefault(queue, channel)
        return owners

    def _take(self, owners: dict[str, Any], wait: float) -> bool:
        queues = list(owners)
        turn = next(self._turn) % len(queues)  # each queue first in its turn
        queues = queues[turn:] + queues[:turn]
        first: Channel = owners[queues[0]]
        # Acknowledged-on-receipt queues and the others are taken alike; the former
        # are settled at once by the channel that consumes them.
        message = first.take(queues, no_ack=False, wait=wait)
        if message is None:
            return False
        queue = first.queue_of(message)
        owner: Channel = owners.get(queue, first)
        if queue in owner._no_ack:
            message.ack()
            payload = owner.payload(message, keep=False)
        else:
            payload = owner.payload(message, keep=True)
        if payload is not None:
            self._deliver(payload, queue)
        return True

    def settled(self) -> None:
        """A consumer settled a message: a drain waiting for prefetch room looks again."""
        self._settled.set()


def close_databases() -> None:
    """Close the databases this process's kombu connections share (tests; a ``memory://``
    broker starts empty again). Connections still open must not be used afterwards."""
    _close_all()
