"""Percentiles, by one method for every benchmark: the nearest rank."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["percentile", "summarize"]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of some samples (q in 0..100); 0.0 if there are none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(math.ceil(q / 100 * len(ordered)) - 1, 0)
    return ordered[min(k, len(ordered) - 1)]


def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, p50, p90, p99 and max of some samples (nearest rank); empty dict if none."""
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "n": float(len(ordered)),
        "p50": percentile(ordered, 50),
        "p90": percentile(ordered, 90),
        "p99": percentile(ordered, 99),
        "max": ordered[-1],
    }
