"""The clock every time in sluice is read from: the wall clock, or one that tests and demos drive.

Message times (enqueued, delay, ttl, expiry, purge ages), task start times,
deadlines and lateness, profile and rate windows and schedules all ask one
``Clock``, the Database's (``db.clock``, the same object as ``db.jobs.clock``),
so a test sets the time instead of sleeping and a demo runs a week in seconds.
Session leases do not: they are judged by real time (see ``sluice.engine.lease``).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from sluice.errors import ConfigurationError

__all__ = ["STEP_BACK_HELD", "Clock", "FastClock", "ManualClock", "OffsetClock", "SystemClock"]

# The largest step back a new connection makes up for (see SystemClock): a database's
# newest stamps further ahead than this were made by a test's or demo's clock, not a
# wall clock stepped back, and waiting for them would stop time for the wrong reason.
STEP_BACK_HELD = 600.0


class Clock(Protocol):
    """The time messages and jobs are judged by, in epoch seconds."""

    def now(self) -> float:
        """The current time, seconds since the epoch."""
        ...

    def real_seconds(self, seconds: float) -> float:
        """How long, in real seconds, ``seconds`` of this clock's time take to pass."""
        ...


class _Forward:
    """Never earlier than it has said: a wall clock stepped back (an NTP step, an operator's
    ``date``) holds still until it catches up, instead of going back in time.

    Going back would stamp new messages earlier than older ones and judge every message
    stamped before the step "not due yet": a message put with no delay would wait out the
    whole step. Holding still instead lengthens delays in flight by at most the step.
    A step forward is taken as it comes (delays and time-to-live end early by it).
    """

    def __init__(self) -> None:
        self._last = 0.0
        self._lock = threading.Lock()

    def _forward(self, wall: float) -> float:
        with self._lock:
            self._last = max(self._last, wall)
            return self._last

    def not_before(self, when: float) -> None:
        """Hold still until ``when``: a time other processes stamped before a step back."""
        self._forward(when)


class SystemClock(_Forward):
    """The wall clock of this host (held still, not set back, when it steps back)."""

    def now(self) -> float:
        return self._forward(time.time())

    def real_seconds(self, seconds: float) -> float:
        return seconds


class OffsetClock(_Forward):
    """The wall clock of this host moved by ``offset`` seconds: another machine's time.

    A PostgreSQL backend sets ``offset`` to the database server's time minus
    this host's, so every host sharing the database times messages alike
    (held still, not set back, when this host's clock steps back, as SystemClock).
    """

    def __init__(self, offset: float = 0.0) -> None:
        super().__init__()
        self.offset = offset

    def now(self) -> float:
        return self._forward(time.time() + self.offset)

    def real_seconds(self, seconds: float) -> float:
        return seconds


class FastClock:
    """A clock that runs ``speed`` times faster than real time from ``start`` (demos)."""

    def __init__(self, start: float, speed: float) -> None:
        if speed <= 0:
            raise ConfigurationError(f"a FastClock's speed must be positive, not {speed!r}")
        self.start = start
        self.speed = speed
        self._origin = time.monotonic()

    def now(self) -> float:
        return self.start + (time.monotonic() - self._origin) * self.speed

    def real_seconds(self, seconds: float) -> float:
        return seconds / self.speed


class ManualClock:
    """A clock that moves only when told to (tests): ``set`` and ``advance``."""

    _POLL = 0.05  # real seconds a waiter sleeps before looking at the clock again

    def __init__(self, start: float) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def set(self, when: float) -> None:
        with self._lock:
            self._now = when

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now += seconds
            return self._now

    def real_seconds(self, seconds: float) -> float:
        return min(seconds, self._POLL) if seconds > 0 else 0.0
