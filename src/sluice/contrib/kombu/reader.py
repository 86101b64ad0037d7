"""Messages for consumers on an event loop (Celery's worker): taken in a thread,
delivered in the loop.

kombu's event loop (the hub Celery's worker runs) waits on file descriptors, and a
sluice consumer waits on the database's wake-ups. The reader thread does the
waiting and the taking, within the consumers' prefetch, and hands each message to
the loop through a pipe; the loop delivers it and lets the reader take the next.
The loop itself never blocks on the database, so a busy worker still answers its
remote control at once, and its pool is fed without blocking locks.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from typing import Any, Protocol

import sluice

__all__ = ["Reader", "Source"]

Handed = tuple[dict[str, Any], str]


class Source(Protocol):
    """What the reader asks of its transport."""

    def consuming(self) -> dict[str, Any]: ...

    def take_payloads(
        self,
        owners: dict[str, Any],
        limit: int,
        wait: float,
        until: threading.Event | None = None,
    ) -> list[Handed | bool]: ...

    def deliver(self, payload: dict[str, Any], queue: str) -> None: ...

    def give_back(self, payload: dict[str, Any]) -> None: ...


log = logging.getLogger("sluice.contrib.kombu")

_IDLE = 1.0  # the longest wait between looks at which consumers have prefetch room
_BATCH = 64  # the most messages handed to the loop at once


class Reader:
    """One transport's reader thread and the pipe its loop watches."""

    def __init__(self, transport: Source) -> None:
        self._transport = transport
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        self._ready: deque[Handed] = deque()
        self._delivered = threading.Event()  # the loop has delivered what was handed
        self._delivered.set()
        # Set by a settle (room in a prefetch), by stop, and by news for the queues.
        self.look_again = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sluice-kombu-reader", daemon=True)
        self._thread.start()

    @property
    def fd(self) -> int:
        """Readable when messages wait for ``on_readable``."""
        return self._read_fd

    def _run(self) -> None:
        transport = self._transport
        while not self._stopping.is_set():
            self._delivered.wait()
            self.look_again.clear()
            if self._stopping.is_set():
                return
            owners = transport.consuming()
            if not owners:
                self.look_again.wait(_IDLE)
                continue
            try:
                batch = self._take_batch(owners)
            except sluice.SluiceError:
                log.exception("sluice kombu transport: taking a message failed; trying again")
                self._stopping.wait(_IDLE)
                continue
            if batch:
                self._delivered.clear()
                self._ready.extend(batch)
                os.write(self._write_fd, b"\0")

    def _take_batch(self, owners: dict[str, Any]) -> list[Handed]:
        """The first message as it comes (waiting), then what is ready now, as far as
        each consumer's prefetch has room: one hand-over to the loop for them all."""
        room = {}
        for channel in owners.values():
            estimate = channel.qos.can_consume_max_estimate()  # None: no prefetch limit
            room[id(channel)] = _BATCH if estimate is None else estimate
        batch: list[Handed] = []
        wait = _IDLE
        while owners and len(batch) < _BATCH:
            # As many as the consumer with the least room left may take: a message
            # goes to its queue's consumer, whichever of them that is.
            limit = min(_BATCH - len(batch), *(room[id(c)] for c in owners.values()))
            taken = self._transport.take_payloads(owners, max(limit, 1), wait, self.look_again)
            if not taken:
                break
            wait = 0.0
            for handed in taken:
                if handed is True or handed is False:  # not kombu's: rejected, none handed
                    continue
                batch.append(handed)
                taker = owners.get(handed[1])
                if taker is not None:
                    room[id(taker)] -= 1
                    if room[id(taker)] <= 0:
                        owners = {q: c for q, c in owners.items() if c is not taker}
        return batch

    def on_readable(self) -> None:
        """In the loop's thread: deliver what the reader took."""
        try:
            while os.read(self._read_fd, 4096):
                pass
        except BlockingIOError:
            pass
        try:
            while self._ready:
                payload, queue = self._ready.popleft()
                self._transport.deliver(payload, queue)
        finally:
            self._delivered.set()

    def stop(self) -> None:
        """End the thread; a message it took and the loop never delivered goes back."""
        self._stopping.set()
        self._delivered.set()
        self.look_again.set()
        self._thread.join()
        for payload, _ in self._ready:
            self._transport.give_back(payload)
        self._ready.clear()
        os.close(self._read_fd)
        os.close(self._write_fd)
