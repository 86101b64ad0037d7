"""CPU seconds of a worker's processes from /proc: its main process (every thread of it: the
event loop and, in-process, the transport's reader and ack threads) and sluice's consumer
process, if it runs one. The bound of a no-op run is the main process's CPU per task."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuSample", "sample"]

_TICK = os.sysconf("SC_CLK_TCK")
_CONSUMER_PROCESS = b"sluice.contrib.kombu.sidecar"


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds used so far (user + system) by the main process and the consumer process."""

    main: float
    consumer_process: float | None


def _seconds(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def _consumer_process(group: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != group:
                continue
            if _CONSUMER_PROCESS in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    return None


def sample(main_pid: int) -> CpuSample | None:
    """The CPU seconds of the worker ``main_pid`` (the leader of its process group) and of
    its consumer process; None if the worker is gone."""
    main = _seconds(main_pid)
    if main is None:
        return None
    side = _consumer_process(main_pid)
    return CpuSample(main, None if side is None else _seconds(side))
