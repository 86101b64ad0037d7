"""Wake-ups across processes for the PostgreSQL backend: LISTEN/NOTIFY, coalesced.

A NOTIFY takes a cluster-wide lock when its transaction commits, so a process
sends at most one per ``min_interval``, for everything committed meanwhile: an
idle system is woken at once, a busy one sends a few hundred notifications a
second however many commits it makes. The first commit after a quiet spell
carries the NOTIFY itself (``take_turn``), the quickest wake-up there is; the
others leave it to the ``Notifier`` thread, which sends one on its own
connection once the interval has passed.

A notification names the queues that gained messages ("*": any) and the
process that sent it. The ``Listener`` thread holds a LISTEN connection and
calls back for the named queues, except on notifications of its own Database:
that Database woke its waiters already, and precisely.

Nobody to tell, nothing to send: while no other session uses the schema (the
sessions table says so at each recovery pass) a Database sends no NOTIFY at
all. A Listener announces itself when it connects, and any notification from
another Database counts as news of a peer, so senders resume at once.

Notifications are only a shortcut: the listener also calls back every
``fallback`` seconds, and after reconnecting a lost connection, so waiters
look for work themselves and nothing depends on a notification arriving.
A Listener given no URL (behind a pooler, which cannot keep a LISTEN, with no
direct URL) does only that.

Neither keeps session state: a NOTIFY through a transaction-mode pooler works,
and relaxes its own commit in its own statement.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import psycopg

__all__ = ["ALL_QUEUES", "Listener", "Notifier", "payload"]

ALL_QUEUES = "*"
_MAX_PAYLOAD = 7900  # PostgreSQL's limit is 8000 bytes


def payload(origin: str, queues: Iterable[str] | None) -> str:
    """A notification's text: the sender, then the queues that gained messages."""
    names = ALL_QUEUES if queues is None else " ".join(sorted(set(queues)))
    text = f"{origin} {names}"
    return text if len(text) <= _MAX_PAYLOAD else f"{origin} {ALL_QUEUES}"


log = logging.getLogger("sluice.postgres")

_RECONNECT_DELAYS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


class Notifier:
    """Sends coalesced NOTIFYs from a daemon thread (see the module docstring)."""

    def __init__(self, conninfo: str, kwargs: dict[str, Any], channel: str, min_interval: float):
        self._conninfo = conninfo
        self._kwargs = kwargs
        self._channel = channel
        self._min_interval = min_interval
        self.origin = uuid.uuid4().hex[:12]
        self._queues: set[str] | None = set()  # to announce; None: all of them
        self.peers = True  # whether another session may be listening (see the docstring)
        self._wanted = threading.Event()
        self._lock = threading.Lock()
        self._last = 0.0  # monotonic time of the last NOTIFY sent or handed out
        self._stop = False
        self._conn: psycopg.Connection[Any] | None = None
        self._thread = threading.Thread(target=self._run, name="sluice-notify", daemon=True)
        self._thread.start()

    def signal(self, queues: Iterable[str] | None = None) -> None:
        """Messages became available in ``queues`` (None: any): a NOTIFY follows soon."""
        if not self.peers:
            return
        with self._lock:
            if queues is None or self._queues is None:
                self._queues = None
            else:
                self._queues.update(queues)
        self._wanted.set()

    def take_turn(self) -> bool:
        """Whether the caller's commit may carry a NOTIFY itself (none sent for a while)."""
        if not self.peers:
            return False
        with self._lock:
            now = time.monotonic()
            if now - self._last < self._min_interval:
                return False
            self._last = now
            return True

    def close(self) -> None:
        self._stop = True
        self._wanted.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._stop:
                break
            with self._lock:
                pause = self._last + self._min_interval - time.monotonic()
            if pause > 0:  # coalesce: everything signalled meanwhile shares this NOTIFY
                time.sleep(pause)
            self._wanted.clear()
            with self._lock:
                self._last = time.monotonic()
                text = payload(self.origin, self._queues)
                self._queues = set()
            self._send(text)
        if self._conn is not None:
            self._conn.close()

    def _send(self, text: str) -> None:
        for delay in (*_RECONNECT_DELAYS, None):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self._conninfo, autocommit=True, **self._kwargs)
                # A NOTIFY's transaction gets an xid, so its commit would wait for a WAL
                # flush: pointless for a wake-up, and on the latency path. Relaxed in the
                # statement's own transaction (set_config(..., true) lasts until its
                # commit), not the session's, which a pooler would hand to others.
                self._conn.execute(
                    "SELECT pg_notify(%s, %s), set_config('synchronous_commit', 'off', true)",
                    (self._channel, text),
                )
                return
            except psycopg.Error as exc:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                if delay is None or self._stop:
                    # Waiters still find the work through their fallback checks.
                    log.warning("sluice could not send a wake-up notification: %s", exc)
                    return
                time.sleep(delay)


class Listener:
    """Calls ``callback(queue)`` on notifications, ``callback(None)`` every ``fallback`` s.

    ``conninfo`` None: no notifications, only the ``fallback`` tick.
    """

    def __init__(
        self,
        conninfo: str | None,
        kwargs: dict[str, Any],
        channel: str,
        callback: Callable[[str | None], None],
        *,
        fallback: float,
        origin: str,
        on_peer: Callable[[], None],
    ) -> None:
        self._origin = origin
        self._on_peer = on_peer
        self._notify = callback
        self._conninfo = conninfo
        self._kwargs = kwargs
        self._channel = channel
        self._fallback = fallback
        self._stop = threading.Event()
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sluice-listen", daemon=True)
        self._thread.start()

    def _call(self, queue: str | None) -> None:
        try:
            self._notify(queue)
        except Exception:  # a failing callback must not end the listening
            log.exception("sluice wake-up callback failed")

    def close(self) -> None:
        """Stop listening; the thread ends within a quarter of a second, on its own."""
        self._stop.set()

    def _run(self) -> None:
        if self._conninfo is None:
            self._tick()
            return
        failures = 0
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True, **self._kwargs) as conn:
                    conn.execute(f'LISTEN "{self._channel}"')
                    # Hello: other Databases learn that someone listens now.
                    conn.execute("SELECT pg_notify(%s, %s)", (self._channel, f"{self._origin} "))
                    failures = 0
                    self.connected.set()
                    self._call(None)  # anything committed while not listening
                    self._listen(conn)
            except psycopg.Error as exc:
                self.connected.clear()
                if self._stop.is_set():
                    break
                delay = _RECONNECT_DELAYS[min(failures, len(_RECONNECT_DELAYS) - 1)]
                failures += 1
                log.warning("sluice lost its notification connection (%s); reconnecting", exc)
                self._call(None)
                self._stop.wait(delay)

    def _tick(self) -> None:
        self.connected.set()
        self._call(None)
        while not self._stop.wait(self._fallback):
            self._call(None)

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        # Short waits so that close() is noticed quickly; the fallback tick and a
        # liveness probe run every `fallback` seconds.
        next_fallback = time.monotonic() + self._fallback
        while not self._stop.is_set():
            for note in conn.notifies(timeout=0.25):
                sender, _, queues = note.payload.partition(" ")
                if sender == self._origin:
                    continue  # this Database woke its own waiters already
                self._on_peer()
                if not queues or queues == ALL_QUEUES:
                    self._call(None)
                else:
                    for queue in queues.split(" "):
                        self._call(queue)
            if time.monotonic() >= next_fallback:
                conn.execute("SELECT 1")  # a dead connection raises here
                next_fallback = time.monotonic() + self._fallback
                self._call(None)
