"""Subprocesses the benchmarks start (workers, servers): each in its own process group, so
that a signal reaches its children too, and stopped for sure at the end of a run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["signal_group", "start_group", "stop_groups"]


def start_group(
    argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """A process in its own process group (so its children stop with it), output to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``proc`` leads; a group already gone is no error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def stop_groups(procs: Sequence[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """SIGTERM each process group, SIGKILL what is left after ``grace`` seconds."""
    for proc in procs:
        signal_group(proc, signal.SIGTERM)
        signal_group(proc, signal.SIGCONT)  # a stopped group acts on SIGTERM once continued
    deadline = time.monotonic() + grace
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(deadline - time.monotonic(), 0.0))
    for proc in procs:
        signal_group(proc, signal.SIGKILL)  # also the group's children if the leader is gone
        if proc.poll() is None:
            proc.wait(10.0)
