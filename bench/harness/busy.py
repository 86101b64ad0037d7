"""The machine's busy CPU time: every core's user, system and interrupt time, from /proc/stat.

On a two-core machine a benchmark's peer and its server share the cores; what they use
together, over a timed run, says whether the run was bound by the CPU: a run cannot end
sooner than its busy seconds divided by the cores.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["machine_busy"]

_TICK = os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """CPU seconds every core has spent busy since boot (all but idle and iowait)."""
    cpu = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(x) for x in cpu]
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICK
