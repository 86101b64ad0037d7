"""Global throughput limits: tasks started per hour and per processing cycle, by profile.

The counts live in the database (rate_windows), one row per task type and window,
so every worker on every host draws on the same allowance: a start is taken with
a conditional UPDATE that fails once the window's cap is reached. A worker that
takes a start and then finds no task gives it back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sluice.backends.base import Effect
from sluice.jobs.catalog import jobs_backend
from sluice.jobs.model import MetricRow, TaskType, WindowRow
from sluice.jobs.profiles import Limits, Profile, cycle_start, hour_start

if TYPE_CHECKING:
    from sluice.engine.database import Engine

__all__ = ["Gate", "Starts"]

_METRIC_TTL = 1.0  # real seconds a reported metric is reused before it is read again


@dataclass(frozen=True, slots=True)
class Starts:
    """Starts taken from the windows in force (to give back if unused)."""

    task_type: str
    windows: tuple[tuple[str, float], ...]
    n: int


class Gate:
    """Takes starts for a task type within its profile's limits, for all workers at once."""

    def __init__(self, db: Engine, signals: dict[str, Callable[[], float]]) -> None:
        self._db = db
        self._signals = signals
        self._profiles: dict[str, tuple[str, Profile]] = {}
        self._metrics: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def profile(self, task_type: TaskType) -> Profile | None:
        if task_type.profile is None:
            return None
        cached = self._profiles.get(task_type.name)
        if cached is None or cached[0] != task_type.profile:
            cached = (task_type.profile, Profile.from_json(task_type.profile))
            self._profiles[task_type.name] = cached
        return cached[1]

    def limits(self, task_type: TaskType, now: float) -> Limits | None:
        """The limits in force for ``task_type`` at ``now``; None: it has no profile."""
        profile = self.profile(task_type)
        if profile is None:
            return None
        return profile.active(datetime.fromtimestamp(now, UTC), self.load)

    def load(self, signal: str) -> float:
        """A load signal's value: a function the worker was given, else the last reported metric.

        KeyError if neither exists (the profile then keeps its fixed limit).
        """
        function = self._signals.get(signal)
        if function is not None:
            return float(function())
        with self._lock:
            cached = self._metrics.get(signal)
        if cached is not None and time.monotonic() - cached[1] < _METRIC_TTL:
            return cached[0]
        rows = jobs_backend(self._db).jobs_read("metric_get", {"name": signal})
        if not rows:
            raise KeyError(signal)
        value = float(MetricRow._make(rows[0]).value)
        with self._lock:
            self._metrics[signal] = (value, time.monotonic())
        return value

    def take(self, task_type: TaskType, now: float, n: int = 1) -> tuple[Starts | None, float]:
        """Take ``n`` starts; (the starts, 0) or, when a cap is reached, (None, when it lifts)."""
        limits = self.limits(task_type, now)
        if limits is None:
            return Starts(task_type.name, (), n), 0.0
        profile = self.profile(task_type)
        assert profile is not None
        windows: list[tuple[str, float, int, float]] = []
        if limits.max_per_hour is not None:
            start = hour_start(now, limits.tz)
            windows.append(("hour", start, limits.max_per_hour, start + 3600.0))
        if limits.max_per_cycle is not None:
            start = cycle_start(now, profile.cycle)
            windows.append(("cycle", start, limits.max_per_cycle, start + profile.cycle))
        if not windows:
            return Starts(task_type.name, (), n), 0.0
        steps = []
        for kind, start, cap, _ in windows:
            key = {"task_type": task_type.name, "kind": kind, "start": start}
            steps.append(Effect("window_open", key))
            steps.append(Effect("window_take", key | {"n": n, "cap": cap}, expect=1))
        # Not flushed to disk: a power cut that loses a count also stopped the work it counted.
        if jobs_backend(self._db).jobs_write(steps, durable=False):
            return Starts(task_type.name, tuple((k, s) for k, s, _, _ in windows), n), 0.0
        full = [
            end
            for kind, start, cap, end in windows
            if not self._fits(task_type, kind, start, cap, n)
        ]
        return None, min(full) if full else now

    def _fits(self, task_type: TaskType, kind: str, start: float, cap: int, n: int) -> bool:
        rows = jobs_backend(self._db).jobs_read(
            "window_used", {"task_type": task_type.name, "since": start}
        )
        used = sum(
            int(w.used) for w in map(WindowRow._make, rows) if w.kind == kind and w.start == start
        )
        return used + n <= cap

    def give_back(self, starts: Starts, n: int | None = None) -> None:
        """Return ``n`` (default: all) unused starts to their windows."""
        count = starts.n if n is None else n
        if not starts.windows or count <= 0:
            return
        steps = [
            Effect(
                "window_give_back",
                {"task_type": starts.task_type, "kind": kind, "start": start, "n": count},
            )
            for kind, start in starts.windows
        ]
        jobs_backend(self._db).jobs_write(steps, durable=False)
