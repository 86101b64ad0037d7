"""Leases: a session stays alive by heartbeat; whoever notices a dead one rolls it back.

A session is dead when its heartbeat is older than its lease, or, on this very
host, when its process no longer exists (so a kill -9 is recovered at once,
without waiting for the lease to run out).

Leases are judged by real time (the wall clock on SQLite, the server's clock on
PostgreSQL), never by the Database's clock (``db.clock``): a test that moves a
ManualClock a week ahead must not make every other live session look dead and
have its work rolled back, and a demo's FastClock must not outrun heartbeats.
A session of this very host and boot is judged by the monotonic clock where the
backend keeps that stamp too (SQLite): a wall clock stepped forward further than the
lease (an NTP step) would otherwise make every live session look dead at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from functools import cache

from sluice.backends.base import SessionInfo

__all__ = ["LeaseKeeper", "host_key", "is_dead"]

log = logging.getLogger("sluice.lease")


@cache
def host_key() -> str:
    """Names this host and pid namespace, so pids are only compared where they mean the same."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = "-"
    try:
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        pidns = "-"
    return f"{socket.gethostname()}|{boot}|{pidns}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_dead(session: SessionInfo, *, me: int, now: float | None = None) -> bool:
    """Whether a session other than ``me`` can be rolled back."""
    if session.id == me:
        return False
    here = session.host == host_key()
    if here and session.heartbeat_mono is not None:
        # One host, one boot: the monotonic clock, which no wall-clock step moves.
        lapsed = session.heartbeat_mono + session.lease < time.monotonic()
    else:
        lapsed = session.heartbeat_at + session.lease < (now if now is not None else time.time())
    return lapsed or (here and not _pid_alive(session.pid))


class LeaseKeeper:
    """A daemon thread that heartbeats every third of the lease and runs recovery."""

    def __init__(self, tick: Callable[[], None], lease: float) -> None:
        self._tick = tick
        self._interval = lease / 3
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sluice-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        failing: str | None = None  # the failure of the last beat, while beats fail
        failed = 0  # beats failed in a row
        while not self._stop.wait(self._interval):
            try:
                self._tick()
            except Exception as exc:
                # A busy or briefly unavailable database must not kill the heartbeat;
                # the next tick retries, well within the lease. A cause is logged with
                # its traceback once; the same failure again is one line each beat (a
                # database dropped under a process that kept it open printed the same
                # traceback every third of a lease for as long as the process lived).
                failed += 1
                text = f"{type(exc).__name__}: {exc}"
                if text != failing:
                    failing = text
                    log.exception("sluice heartbeat failed; retrying in %.1fs", self._interval)
                else:
                    log.error(
                        "sluice heartbeat failed again (%d beats in a row), as above: %s; "
                        "retrying in %.1fs",
                        failed,
                        text.splitlines()[0],
                        self._interval,
                    )
            else:
                if failed:
                    log.warning("sluice heartbeat recovered after %d failed beats", failed)
                failing, failed = None, 0
