"""Clocks for jobs: the wall clock, or one that tests and demos drive.

Everything in sluice.jobs that depends on the time of day (deadlines, late jobs,
profile windows, rate windows, schedules) asks a clock, so tests set the time
instead of sleeping and a demo can run a week in seconds. Message delays and
leases stay on the wall clock: they are the queue engine's.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "FastClock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """The time jobs are judged by, in epoch seconds."""

    def now(self) -> float:
        """The current time, seconds since the epoch."""
        ...

    def real_seconds(self, seconds: float) -> float:
        """How long, in real seconds, ``seconds`` of this clock's time take to pass."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        return time.time()

    def real_seconds(self, seconds: float) -> float:
        return seconds


class FastClock:
    """A clock that runs ``speed`` times faster than real time from ``start`` (demos)."""

    def __init__(self, start: float, speed: float) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.start = start
        self.speed = speed
        self._origin = time.monotonic()

    def now(self) -> float:
        return self.start + (time.monotonic() - self._origin) * self.speed

    def real_seconds(self, seconds: float) -> float:
        return seconds / self.speed


class ManualClock:
    """A clock that moves only when told to (tests): ``set`` and ``advance``."""

    _POLL = 0.05  # real seconds a waiting worker sleeps before looking at the clock again

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
