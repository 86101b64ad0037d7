"""Wake-ups across processes for the SQLite backend: inotify on the database's directory.

Every commit in WAL mode appends frames to ``<db>-wal`` (the ``-shm`` index is
mmap'ed and makes no event), so a write to that file is the news. The
directory is watched, not the file: the WAL is deleted, recreated and
truncated as the database is checkpointed and closed, and a directory watch
outlives all that. The producer's commit is untouched; the watching costs the
other processes a thread each, blocked in ``select``.

The watcher works only while a thread or task of this process waits for work
(``want``): a Database that only produces, or whose consumers are busy, pays
nothing for it, not even a thread switch per commit.

An event comes with the commit's first write, before the commit is visible
(at ``synchronous=FULL`` an fsync still follows), so after each write to the
WAL the ``Watcher`` checks ``PRAGMA data_version`` on its own connection, at
growing intervals (0.5 ms at first, a quarter of the time since the write
later) for a second. A change there goes to the backend's ``change_token``,
which counts only other connections' commits: this Database's own commits,
which it has woken its waiters for already, wake nobody here. Every
``FALLBACK`` seconds without events the token is checked too, in case an
event was lost (an overflowing event queue).

Linux only (inotify through libc). Elsewhere, or when the kernel refuses
another inotify instance (``fs.inotify.max_user_instances``), ``watch``
returns None and waiters poll the change token every ``poll_interval``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import sqlite3
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["FALLBACK", "Watcher", "watch"]

FALLBACK = 1.0
"""Seconds between checks of the change token when no event came."""

log = logging.getLogger("sluice.sqlite")

_IN_MODIFY = 0x00000002
_IN_CREATE = 0x00000100
_IN_Q_OVERFLOW = 0x00004000  # events were lost: treated as news
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name

_FIRST_CHECK = 0.0005
_LAST_CHECK = 0.025
_CHECK_FOR = 1.0  # seconds of checks after the last write to the WAL
_REST = 0.0005  # seconds between two checks, however many writes come


class _Inotify:
    """An inotify descriptor and a watch on one directory that comes and goes."""

    def __init__(self, fd: int, directory: bytes, add: Any, remove: Any) -> None:
        self.fd = fd
        self._directory = directory
        self._add = add
        self._remove = remove
        self._wd = -1

    def start(self) -> None:
        """Watch the directory: from now on its writes make events."""
        if self._wd < 0:
            self._wd = int(self._add(self.fd, self._directory, _IN_MODIFY | _IN_CREATE))
            if self._wd < 0:
                error = os.strerror(ctypes.get_errno())
                log.warning("sluice cannot watch %s (%s)", self._directory, error)

    def stop(self) -> None:
        """No events: every write to a watched directory costs its writer an event."""
        if self._wd >= 0:
            self._remove(self.fd, self._wd)
            self._wd = -1


def _inotify(directory: str) -> _Inotify | None:
    """An inotify descriptor for watching ``directory`` (not watching yet), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        init, add, remove = libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch
    except (OSError, AttributeError):
        return None
    add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
    remove.argtypes = (ctypes.c_int, ctypes.c_int)
    fd = int(init(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        error = os.strerror(ctypes.get_errno())
        log.warning("sluice cannot watch %s (%s): SQLite waiters poll instead", directory, error)
        return None
    encoded = os.fsencode(directory)
    probe = add(fd, encoded, _IN_MODIFY | _IN_CREATE)  # can it be watched at all?
    if probe < 0:
        error = os.strerror(ctypes.get_errno())
        os.close(fd)
        log.warning("sluice cannot watch %s (%s): SQLite waiters poll instead", directory, error)
        return None
    remove(fd, probe)
    return _Inotify(fd, encoded, add, remove)


def watch(
    path: str,
    connect: Callable[[], sqlite3.Connection],
    token: Callable[[], int],
    callback: Callable[[str | None], None],
) -> Watcher | None:
    """A Watcher calling ``callback(None)`` on other processes' commits to ``path``.

    None where the platform offers no watch (see the module docstring).
    """
    if path == ":memory:" or path.startswith("file:"):
        return None  # no file of its own, or one named by a URI: nothing to watch
    path = os.path.realpath(path)  # SQLite follows a symlink: its WAL is by the real file
    inotify = _inotify(os.path.dirname(path))
    if inotify is None:
        return None
    try:
        conn = connect()
    except BaseException:
        os.close(inotify.fd)
        raise
    return Watcher(inotify, os.fsencode(os.path.basename(path) + "-wal"), conn, token, callback)


def _pause(since: float | None) -> float:
    """How long to wait for events: checks come closer together right after a write."""
    if since is None:
        return FALLBACK
    return min(max((time.monotonic() - since) / 4, _FIRST_CHECK), _LAST_CHECK)


class Watcher:
    """A daemon thread turning writes to the WAL into ``callback(None)`` (module docstring)."""

    def __init__(
        self,
        inotify: _Inotify,
        wal: bytes,
        conn: sqlite3.Connection,
        token: Callable[[], int],
        callback: Callable[[str | None], None],
    ) -> None:
        self._inotify = inotify
        self._fd = inotify.fd
        self._wal = wal
        self._conn = conn
        self._token = token
        self._callback = callback
        self._wanted = threading.Event()
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="sluice-sqlite-watch", daemon=True)
        self._thread.start()

    def want(self, wanted: bool) -> None:
        """Watch (someone in this process waits for work), or rest until wanted again.

        Resting, the directory is not even watched: an inotify watch makes every
        write to it (this process's commits too) queue an event, about a tenth of
        a small commit's time.
        """
        if wanted:
            self._inotify.start()
            self._wanted.set()
        else:
            self._wanted.clear()
            self._inotify.stop()

    def close(self) -> None:
        """Stop watching; returns once the thread has ended. Idempotent."""
        if self._stop_w < 0:
            return
        os.write(self._stop_w, b"x")
        self._wanted.set()  # a resting thread wakes to see the stop
        if self._thread is not threading.current_thread():
            self._thread.join()
        os.close(self._stop_w)
        self._stop_w = -1

    def _run(self) -> None:
        try:
            while True:
                try:
                    self._watch()
                    return
                except Exception:
                    log.exception("sluice's SQLite watcher failed; it starts again in a second")
                if select.select([self._stop_r], [], [], FALLBACK)[0]:
                    return
                self._call()  # news may have come meanwhile
        finally:
            self._conn.close()
            os.close(self._fd)
            os.close(self._stop_r)

    def _watch(self) -> None:
        """Watch until told to stop."""
        seen = self._version()
        last = self._token()
        since: float | None = None  # when the WAL was last written to, for _CHECK_FOR
        while True:
            if not self._wanted.is_set():
                if self._rest():
                    return
                # A commit written before now may become visible only later (its fsync):
                # a window of checks, as after an event.
                since = time.monotonic()
            ready, _, _ = select.select([self._fd, self._stop_r], [], [], _pause(since))
            if self._stop_r in ready:
                return
            if self._fd in ready:
                if self._news():
                    since = time.monotonic()
                elif since is None:
                    continue  # another file in the directory
            elif since is None:
                last = self._tell(last)  # the safety net: no event for a while
                continue
            version = self._version()
            if version != seen:
                seen = version
                last = self._tell(last)
            # Checked on for a while even after a commit showed: another may be in
            # flight (written before this check, visible after its fsync), and the
            # commit that showed may have been this Database's own.
            if since is not None and time.monotonic() - since > _CHECK_FOR:
                since = None
            if select.select([self._stop_r], [], [], _REST)[0]:
                return  # a flood of writes costs one check per _REST at most

    def _rest(self) -> bool:
        """Wait until someone waits for news again; True if told to stop meanwhile."""
        self._wanted.wait()
        return bool(select.select([self._stop_r], [], [], 0)[0])

    def _news(self) -> bool:
        """Whether the pending events include a write to the WAL."""
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return False
        offset, news = 0, False
        while offset < len(data):
            _, mask, _, size = _EVENT.unpack_from(data, offset)
            name = data[offset + _EVENT.size : offset + _EVENT.size + size].rstrip(b"\0")
            offset += _EVENT.size + size
            # IN_IGNORED comes when want(False) removes the watch: no news in itself.
            news = news or name == self._wal or bool(mask & _IN_Q_OVERFLOW)
        return news

    def _version(self) -> int:
        value: int = self._conn.execute("PRAGMA data_version").fetchone()[0]
        return value

    def _tell(self, last: int) -> int:
        """Call back if another connection committed since ``last``; the token now."""
        token = self._token()
        if token != last:
            self._call()
        return token

    def _call(self) -> None:
        try:
            self._callback(None)
        except Exception:  # a failing callback must not end the watching
            log.exception("sluice wake-up callback failed")
