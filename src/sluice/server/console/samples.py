"""Depth over time for the console's charts: one thread of the app samples every queue's
counts (``db.overview()``: one statement, and one per subscription for what waits in its
topic) and the task types' profile windows into a ring buffer.

The samples live in the server's process: a chart starts when the server does, and
each worker of a server with several keeps its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import sluice
from sluice.errors import SluiceError
from sluice.server.profiles import usage

__all__ = ["DEFAULT_EVERY", "DUTY", "KEPT", "Sample", "Sampler", "pause"]

log = logging.getLogger(__name__)

DEFAULT_EVERY = 2.0
"""Seconds between samples."""

KEPT = 300
"""Samples kept: ten minutes at the default pace."""

DUTY = 0.02
"""The largest share of the time the sampler may spend sampling. Counting by state
reads every message of every queue; with millions kept (a backlog) one sample takes a
good part of a second, and on SQLite it holds the database's one connection meanwhile.
A slow sample stretches the pause after it to ``took / DUTY``."""


@dataclass(frozen=True, slots=True)
class Sample:
    """Every queue's counts at one time, and the starts of task types under a profile."""

    at: float
    counts: dict[str, tuple[int, int, int, int]]
    """By queue: ready, delayed, claimed and failed messages (queues with none absent)."""
    starts: dict[str, tuple[int, int | None]]
    """By task type queue: starts in the current hour of its profile, and its cap."""

    def depth(self, queue: str) -> int:
        """Messages waiting or in flight: ready, delayed and claimed."""
        ready, delayed, claimed, _ = self.counts.get(queue, (0, 0, 0, 0))
        return ready + delayed + claimed


def pause(every: float, took: float, duty: float = DUTY) -> float:
    """Seconds to wait after a sample that ``took`` seconds: ``every``, or longer to keep
    the sampler within ``duty`` of the time."""
    return max(every, took / duty)


class Sampler:
    """Samples ``db`` every ``every`` seconds on a thread of its own, from ``start`` to
    ``close``; ``samples()`` are the latest KEPT, oldest first."""

    def __init__(
        self, db: sluice.Database, *, every: float = DEFAULT_EVERY, duty: float = DUTY
    ) -> None:
        if every <= 0:
            raise ValueError(f"the console samples every so many seconds > 0, not {every!r}")
        if not 0 < duty <= 1:
            raise ValueError(f"the sampler's duty is a share of the time in (0, 1], not {duty!r}")
        self._db = db
        self.every = every
        self.duty = duty
        self._ring: deque[Sample] = deque(maxlen=KEPT)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="sluice-console-sampler", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def samples(self) -> list[Sample]:
        return list(self._ring)

    def take(self) -> Sample:
        """Sample now (also what the thread does each time)."""
        db = self._db
        now = db.clock.now()
        counts = {}
        # As the pages count: a subscription's messages still in its topic are its own.
        for row in db.overview():
            c = row.counts
            shown = (c["ready"], c["delayed"], c["claimed"], c["failed"])
            if any(shown):  # a sample of thousands of empty queues holds none of them
                counts[row.name] = shown
        starts = {w.queue: (w.starts, w.limit) for w in usage(db, now) if w.window == "hour"}
        sample = Sample(now, counts, starts)
        self._ring.append(sample)
        return sample

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.take()
            except SluiceError:  # the database is away: the chart shows a gap
                log.warning("the console could not sample the queues", exc_info=True)
            self._stop.wait(pause(self.every, time.monotonic() - started, self.duty))


def series(samples: Iterable[Sample], queue: str) -> list[tuple[float, int]]:
    """(time, depth) of ``queue`` in each sample."""
    return [(s.at, s.depth(queue)) for s in samples]
