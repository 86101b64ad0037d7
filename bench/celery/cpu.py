"""CPU seconds of a worker's processes from /proc: its main process (every thread of it: the
event loop and, in-process, the transport's reader and ack threads) and sluice's consumer
process, if it runs one; and, to see where a two-core machine's time goes, the broker's
server processes (PostgreSQL's backends, RabbitMQ's VM, redis-server) and the whole
machine. The bound of a no-op run is the main process's CPU per task, or the machine's."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bench.harness import machine_busy

__all__ = ["CpuSample", "sample"]

_TICK = os.sysconf("SC_CLK_TCK")
_CONSUMER_PROCESS = b"sluice.contrib.kombu.sidecar"
_BROKERS = frozenset({"postgres", "beam.smp", "redis-server"})  # the servers' process names


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds used so far (user + system) by the main process, the consumer process,
    each broker server process (by pid: only those alive at both samples count), and the
    machine (every core's busy time)."""

    main: float
    consumer_process: float | None
    broker: dict[int, float]
    machine: float

    def broker_since(self, earlier: CpuSample) -> float:
        """The broker's CPU seconds between ``earlier`` and this sample."""
        before = earlier.broker
        return sum(s - before[pid] for pid, s in self.broker.items() if pid in before)


def _fields(pid: int | str) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, tail = stat.rsplit(")", 1)
    return [head.split("(", 1)[1], *tail.split()]  # comm, state, ppid, pgrp, ...


def _seconds(fields: list[str]) -> float:
    return (int(fields[12]) + int(fields[13])) / _TICK  # utime, stime


def sample(main_pid: int) -> CpuSample | None:
    """The CPU seconds of the worker ``main_pid`` (the leader of its process group), of its
    consumer process, of the broker's servers and of the machine; None if the worker is
    gone."""
    main = _fields(main_pid)
    if main is None:
        return None
    side: float | None = None
    broker: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _fields(entry.name)
        if fields is None:
            continue
        if fields[0] in _BROKERS:
            broker[int(entry.name)] = _seconds(fields)
            continue
        if int(fields[3]) != main_pid:  # its process group
            continue
        try:
            if _CONSUMER_PROCESS in (entry / "cmdline").read_bytes():
                side = _seconds(fields)
        except OSError:
            continue
    return CpuSample(_seconds(main), side, broker, machine_busy())
