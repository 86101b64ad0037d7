"""The worker's side of its consumer process (sluice.contrib.kombu.sidecar).

With ``consumer_process`` on, a transport on kombu's event loop (Celery's worker) has its
messages claimed and its acknowledgements committed by a process it starts, not by
threads of its own: the worker's GIL then does Celery's work, reading ready payloads
and writing settles, and nothing else. The socket to that process sits in the loop as
the reader's pipe does in-process; the process starts with the first consumer.

If the consumer process dies, its messages go back to their queues (its session ends)
and are delivered again; this side logs it, starts another, and drops the settles of
the messages the dead one held, with a warning (at least once, as after a worker's
death). A prefork pool's children close their inherited copy of the socket at fork, so
that when the worker dies the consumer process sees the end of the socket at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections import Counter, deque
from typing import Any, Protocol

from sluice.contrib.kombu.names import to_sluice
from sluice.contrib.kombu.wire import Frames, frame

__all__ = ["ConsumerProcess", "Host"]

log = logging.getLogger("sluice.contrib.kombu")

_RESTART_GAP = 1.0  # the least time between two starts: a process that cannot start spins not
_STOP_TIMEOUT = 30.0  # for the acks sent to be committed before the process is killed
_READ = 1 << 18

Reported = list[tuple[int, int, list[str], list[str], int]]


class Host(Protocol):
    """What the consumer process asks of its transport."""

    @property
    def broker_url(self) -> str: ...

    @property
    def channels(self) -> list[Any]: ...

    def deliver(self, payload: dict[str, Any], queue: str) -> None: ...


class ConsumerProcess:
    """One transport's consumer process, its socket in ``loop``, and the tags it holds."""

    def __init__(self, transport: Host, loop: Any) -> None:
        self._transport = transport
        self._loop = loop
        self._pid = os.getpid()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._frames = Frames()
        self._send_lock = threading.Lock()  # kombu allows an ack from another thread
        self._tags: dict[str, int] = {}  # delivered, unsettled: tag -> consumer (channel id)
        self._orphans: dict[str, int] = {}  # held by a consumer process that is gone
        self._reported: Reported | None = None
        self._started = -_RESTART_GAP
        self._restarting = False
        self._stopped = False
        _live.add(self)

    @property
    def pid(self) -> int | None:
        """The consumer process's pid, None while none runs."""
        return None if self._proc is None else self._proc.pid

    def refresh(self) -> None:
        """Report the consumers (queues, prefetch) if they changed; the first one starts
        the process."""
        if self._stopped or os.getpid() != self._pid:
            return
        consumers = self._consumers()
        if consumers == self._reported:
            return
        if self._sock is None:
            if not consumers or self._restarting:
                return
            self._start()
        self._reported = consumers
        self._send(("consumers", consumers))

    def _consumers(self) -> Reported:
        elsewhere = Counter(self._orphans.values())
        found: Reported = []
        for channel in self._transport.channels:
            if channel._consumers:
                active = list(channel._active_queues)
                found.append(
                    (
                        id(channel),
                        channel.qos.prefetch_count or 0,
                        [to_sluice(q) for q in active],
                        [to_sluice(q) for q in active if q in channel._no_ack],
                        elsewhere[id(channel)],
                    )
                )
        return found

    def settle(self, tag: str, how: str) -> bool:
        """Settle ``tag`` (``ack``, ``release`` or ``reject``) if the consumer process
        delivered it; False if it did not."""
        if self._tags.pop(tag, None) is not None:
            self._send((how, tag))
            return True
        if self._orphans.pop(tag, None) is not None:
            log.warning(
                "message %s: its %s is dropped: the consumer process that held it is gone, "
                "and the message went back to its queue; it is (or will be) delivered again",
                tag,
                how,
            )
            self.refresh()  # its consumer's prefetch has room again
            return True
        return False

    def on_readable(self) -> None:
        """In the loop's thread: deliver what the consumer process sent."""
        sock = self._sock
        if sock is None:
            return
        try:
            data = sock.recv(_READ, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        todo: deque[tuple[int, str, str, dict[str, Any]]] = deque()
        for message in self._frames.feed(data):
            if message[0] == "deliver":
                todo.extend(message[1])
            elif message[0] == "log":
                log.log(message[1], "consumer process %s: %s", self.pid, message[2])
        deliver, tags = self._transport.deliver, self._tags
        try:
            while todo:
                cid, tag, queue, payload = todo.popleft()
                tags[tag] = cid  # first: a consumer may settle it within deliver
                deliver(payload, queue)
        finally:
            # A consumer's callback raised: what it was not handed goes back (held there,
            # it would count against the prefetch for good).
            for _, tag, _, _ in todo:
                self._send(("release", tag))
        if not data:
            self._gone()

    def stop(self) -> None:
        """Stop the consumer process: it commits the acknowledgements sent, and what it
        still holds goes back to its queues."""
        if self._stopped or os.getpid() != self._pid:
            return
        self._stopped = True
        sock, proc = self._sock, self._proc
        if sock is None or proc is None:
            return
        self._loop.remove(sock.fileno())
        self._send(("stop",))
        # Read to the end: a delivery on its way must not block the process's exit (it is
        # held there, and goes back at its close); its last records are logged here.
        sock.settimeout(_STOP_TIMEOUT)
        try:
            while data := sock.recv(_READ):
                for message in self._frames.feed(data):
                    if message[0] == "log":
                        log.log(message[1], "consumer process %s: %s", proc.pid, message[2])
        except OSError:
            pass
        self._reap(proc)
        sock.close()
        self._sock = self._proc = None
        self._orphans.update(self._tags)
        self._tags.clear()

    def forget(self) -> None:
        """In a forked child: close the inherited socket, so that only the worker holds
        it (the consumer process must see the end of it when the worker dies)."""
        if self._sock is not None:
            self._sock.close()
        self._sock = self._proc = None
        self._stopped = True

    def _start(self) -> None:
        parent, child = socket.socketpair()
        try:
            argv = [sys.executable, "-m", "sluice.contrib.kombu.sidecar", str(child.fileno())]
            # In the worker's process group (a kill of the group ends it too); never a fork
            # (SQLite connections and threads do not survive one).
            proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
                argv, pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self._sock, self._proc = parent, proc
        self._started = time.monotonic()
        self._send(("hello", self._transport.broker_url))
        self._loop.add_reader(parent.fileno(), self.on_readable)
        log.info("sluice kombu transport: consumer process %d started", proc.pid)

    def _send(self, message: tuple[Any, ...]) -> None:
        sock = self._sock
        if sock is None:
            return
        data = frame(message)
        # If it is gone, the end of the socket reaches on_readable next.
        with self._send_lock, contextlib.suppress(OSError):
            sock.sendall(data)

    def _gone(self) -> None:
        """The consumer process died: its messages went back; start another."""
        sock, proc = self._sock, self._proc
        self._sock = self._proc = None
        self._frames = Frames()
        if sock is not None:
            self._loop.remove(sock.fileno())
            sock.close()
        code = None if proc is None else self._reap(proc, timeout=1.0)
        lost = len(self._tags)
        self._orphans.update(self._tags)
        self._tags.clear()
        self._reported = None
        if self._stopped:
            return
        log.error(
            "sluice kombu transport: the consumer process %s exited (code %s); the %d "
            "messages it held go back to their queues and are delivered again (their "
            "settles here are dropped); starting another",
            None if proc is None else proc.pid,
            code,
            lost,
        )
        self._restarting = True
        wait = max(self._started + _RESTART_GAP - time.monotonic(), 0.0)
        self._loop.call_later(wait, self._restart)

    def _restart(self) -> None:
        self._restarting = False
        self.refresh()

    @staticmethod
    def _reap(proc: subprocess.Popen[bytes], timeout: float = _STOP_TIMEOUT) -> int:
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.error("sluice kombu transport: consumer process %d did not stop: killed", proc.pid)
            proc.kill()
            return proc.wait()


_live: weakref.WeakSet[ConsumerProcess] = weakref.WeakSet()


def _forget_all() -> None:
    for consumer_process in list(_live):
        consumer_process.forget()


os.register_at_fork(after_in_child=_forget_all)
