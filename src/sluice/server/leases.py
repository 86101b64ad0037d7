"""Leases: messages an HTTP client took, held by the server until the client settles
them by their delivery token, or until the lease runs out.

A leased message is taken as ``Queue.get`` takes one, in its own transaction, through
the asyncio API (``sluice.aio``: a long poll holds no thread while it waits), so each
settles alone: ``ack`` commits it (done), ``release`` gives it back to its
place, ``reject`` sends it to the error queue. A lease that runs out releases its
message (an attempt counted, as any delivery that ended unacknowledged), and its
token is then stale: settling by it is refused (410), so a client that was too slow
cannot acknowledge a message somebody else now holds. Times are the database's
clock (a ManualClock in tests); a reaper thread waits for the next expiry.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from dataclasses import dataclass, field

from sluice.aio import AsyncMessage
from sluice.clock import Clock
from sluice.errors import SluiceError, StorageError
from sluice.server.problems import Problem
from sluice.server.reaper import Reaper

__all__ = ["MAX_LEASE", "Lease", "Leases"]

log = logging.getLogger(__name__)

MAX_LEASE = 12 * 3600.0
"""The longest a lease lasts, extensions included (as SQS's visibility timeout)."""

GIVE_BACK = 30.0
"""Real seconds the reaper waits for the event loop to give back one expired message."""


@dataclass(slots=True)
class Lease:
    """A leased message, its token and when the lease ends (the database's clock)."""

    token: str
    message: AsyncMessage
    expires: float
    ends_by: float
    """The lease cannot be extended past this (MAX_LEASE after it began)."""
    stream: str | None = None
    """The event stream that leased it (None: a lease request)."""
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)
    """The loop the message was taken on: it is settled there (sluice.aio)."""


class Leases:
    """The server's leased messages by token (see the module docstring)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._held: dict[str, Lease] = {}
        self._changed = threading.Condition()
        self._reaper = Reaper("sluice-leases", clock, self._changed, self._next, self.expire)

    def __len__(self) -> int:
        with self._changed:
            return len(self._held)

    def add(self, message: AsyncMessage, seconds: float, *, stream: str | None = None) -> Lease:
        """Hold ``message`` (taken by ``AsyncQueue.get``, on the running loop) for
        ``seconds``; its new lease."""
        now = self._clock.now()
        lease = Lease(secrets.token_urlsafe(24), message, now + seconds, now + MAX_LEASE,
                      stream)  # fmt: skip
        with self._changed:
            self._held[lease.token] = lease
            self._changed.notify_all()
        return lease

    def take(self, token: str) -> Lease:
        """The lease of ``token``, ended now (the caller settles its message); 410 if the
        token is unknown or its lease ran out."""
        with self._changed:
            lease = self.peek(token)
            del self._held[token]
            self._changed.notify_all()  # a stream waiting for credit may go on
            return lease

    def peek(self, token: str) -> Lease:
        """The live lease of ``token`` without ending it; 410 as for ``take``."""
        with self._changed:
            lease = self._held.get(token)
            if lease is None or lease.expires <= self._clock.now():
                raise Problem(410, "the delivery token is stale: its lease ended or it was "
                              "settled already", error="LeaseEnded")  # fmt: skip
            return lease

    def extend(self, token: str, seconds: float) -> Lease:
        """Let ``token``'s lease end ``seconds`` from now (at most MAX_LEASE after it began)."""
        with self._changed:
            lease = self.peek(token)
            lease.expires = min(self._clock.now() + seconds, lease.ends_by)
            self._changed.notify_all()
            return lease

    def wait_for_credit(self, stream: str, credit: int, timeout: float) -> bool:
        """Until ``stream`` holds fewer than ``credit`` leases (True), or ``timeout`` real
        seconds pass (False)."""
        with self._changed:
            return self._changed.wait_for(
                lambda: sum(1 for x in self._held.values() if x.stream == stream) < credit,
                timeout,
            )

    async def end_stream(self, stream: str) -> int:
        """The stream's client went: give back what it held; how many."""
        with self._changed:
            ended = [lease for lease in self._held.values() if lease.stream == stream]
            for lease in ended:
                del self._held[lease.token]
        for lease in ended:
            await _release(lease)
        return len(ended)

    def take_queue(self, queue: str) -> list[Lease]:
        """The leases of every message held from ``queue``, ended now (the caller settles
        their messages)."""
        with self._changed:
            ended = [lease for lease in self._held.values() if lease.message.queue == queue]
            for lease in ended:
                del self._held[lease.token]
            self._changed.notify_all()
        return ended

    async def end_queue(self, queue: str) -> int:
        """Give back every message held from ``queue`` (before it is dropped); how many."""
        ended = self.take_queue(queue)
        for lease in ended:
            await _release(lease)
        return len(ended)

    async def give_back_due(self, queue: str) -> int:
        """Release now, on this loop, the messages of ``queue`` whose lease ran out and
        that the reaper has not given back yet; how many. A consumer that comes for
        messages just after a lease ended finds its message back, however late the
        reaper's thread runs on a loaded machine."""
        now = self._clock.now()
        with self._changed:
            ended = [lease for lease in self._held.values()
                     if lease.expires <= now and lease.message.queue == queue]  # fmt: skip
            for lease in ended:
                del self._held[lease.token]
            if ended:
                self._changed.notify_all()
        for lease in ended:
            await _release(lease)
        return len(ended)

    def expire(self) -> int:
        """Release every message whose lease ran out; how many. Called off the event loop
        (the reaper's thread): each is given back on its loop, waited for."""
        now = self._clock.now()
        with self._changed:
            ended = [lease for lease in self._held.values() if lease.expires <= now]
            for lease in ended:
                del self._held[lease.token]
            self._changed.notify_all()
        for lease in ended:
            try:
                done = asyncio.run_coroutine_threadsafe(_release(lease), lease.loop)
                done.result(timeout=GIVE_BACK)
            except (RuntimeError, TimeoutError) as exc:  # the loop stopped, or is stuck
                # Not lost: the session's recovery gives it back if this process dies.
                log.warning("an expired lease's message could not be given back: %r", exc)
        return len(ended)

    async def close(self) -> None:
        """Stop the reaper and give every leased message back (on the loop)."""
        await asyncio.to_thread(self._reaper.stop)
        with self._changed:
            held = list(self._held.values())
            self._held.clear()
        for lease in held:
            await _release(lease)

    def _next(self) -> float | None:
        return min((lease.expires for lease in self._held.values()), default=None)


async def _release(lease: Lease) -> None:
    try:
        await lease.message.release()
    except (SluiceError, StorageError) as exc:
        # Its session was taken for dead meanwhile: recovery gave it back already.
        log.warning("a leased message could not be given back: %s", exc)
