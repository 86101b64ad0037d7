"""Wake-ups for a dropbox: inotify events on its ``target/`` directories as a hint, and
a re-listing every ``poll`` seconds whatever comes, because events do not arrive
from other hosts on network file systems (NFS, SMB) nor past a full event queue.

Linux only (inotify through libc); elsewhere, or when the kernel refuses another
inotify instance, ``Watcher`` only waits out ``poll``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

__all__ = ["Watcher"]

log = logging.getLogger("sluice.dropbox")

_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DONT_FOLLOW = 0x02000000
# A target/ swapped for a link is not watched through it (events are only a hint: the
# listing that follows opens the directory without following links, and refuses it).
_MASK = _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE | _IN_DONT_FOLLOW


def _inotify(directories: Iterable[Path]) -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        log.warning("sluice.dropbox polls: no inotify (%s)", os.strerror(ctypes.get_errno()))
        return None
    for directory in directories:
        if libc.inotify_add_watch(fd, os.fsencode(directory), _MASK) < 0:
            error = os.strerror(ctypes.get_errno())
            log.warning("sluice.dropbox polls %s: it cannot be watched (%s)", directory, error)
    return fd


class Watcher:
    """Waits for news in some directories: an event, or ``poll`` seconds."""

    def __init__(self, directories: Iterable[Path], *, poll: float, events: bool = True) -> None:
        self._poll = poll
        self._fd = _inotify(directories) if events else None
        self._lock = threading.Lock()

    def wait(self, stop: threading.Event) -> None:
        """Return after an event, ``poll`` seconds, or once ``stop`` is set (checked every
        ``poll`` seconds at most)."""
        if self._fd is None:
            stop.wait(self._poll)
            return
        ready, _, _ = select.select([self._fd], [], [], self._poll)
        if ready:
            self._drain()

    def _drain(self) -> None:
        assert self._fd is not None
        try:
            while os.read(self._fd, 65536):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Stop watching."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
