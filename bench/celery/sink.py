"""Where the benchmark's task stamps what it did, outside every broker: one append-only file
per worker process, two lines per run of a task, read back by the parent as they grow.

A line is written with one ``os.write`` to a file opened ``O_APPEND``, so it is in the page
cache, and readable by the parent, before the task returns, and survives a SIGKILL of the
writer. It costs the same few microseconds under every broker.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Sink", "SinkWriter", "Start"]


class SinkWriter:
    """The task's side: ``S no sent start pid`` when a run starts, ``F no end`` when it ends."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd = -1
        self._pid = -1

    def _write(self, line: str) -> None:
        pid = os.getpid()
        if pid != self._pid:  # a forked pool process writes its own file
            self._fd = os.open(
                self.directory / f"{pid}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
            )
            self._pid = pid
        os.write(self._fd, line.encode())

    def started(self, no: int, sent: float, start: float) -> None:
        self._write(f"S {no} {sent!r} {start!r} {os.getpid()}\n")

    def finished(self, no: int, end: float) -> None:
        self._write(f"F {no} {end!r}\n")


@dataclass(frozen=True)
class Start:
    """One run of a task starting: when it was enqueued and started (``time.time()``), where."""

    no: int
    sent: float
    start: float
    pid: int


class Sink:
    """The parent's side: every start and end written so far, read incrementally."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.starts: dict[int, list[Start]] = defaultdict(list)
        self.ends: dict[int, list[float]] = defaultdict(list)
        self._offsets: dict[Path, int] = {}

    def read(self) -> None:
        """Take in the complete lines written since the last read."""
        for path in self.directory.glob("*.log"):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            complete = data.rfind(b"\n") + 1  # a line being written is read next time
            self._offsets[path] = offset + complete
            for line in data[:complete].decode().splitlines():
                self._take(line.split())

    def _take(self, parts: list[str]) -> None:
        no = int(parts[1])
        if parts[0] == "S":
            self.starts[no].append(Start(no, float(parts[2]), float(parts[3]), int(parts[4])))
        else:
            self.ends[no].append(float(parts[2]))

    def done(self, nos: range) -> int:
        """How many of the tasks numbered ``nos`` have finished at least once."""
        return sum(1 for no in nos if self.ends.get(no))

    def running(self) -> list[Start]:
        """Runs started and not (yet) finished, latest first: where a kill lands mid-task."""
        open_runs = [
            runs[-1] for no, runs in self.starts.items() if len(runs) > len(self.ends.get(no, ()))
        ]
        return sorted(open_runs, key=lambda s: s.start, reverse=True)
