"""One ``sluice.Database`` per process and URL, shared by every backend instance using it.

Django builds task backends per thread (``task_backends`` is thread-local), and a worker
runs tasks in threads of its own; a sluice Database is thread-safe and holds a session
and connections, so all of them share one. A forked child (a pre-forking web server)
opens its own: the parent's session and connections are not the child's to use.
"""

from __future__ import annotations

import atexit
import os
import threading

import sluice

__all__ = ["close_databases", "database"]

_open: dict[tuple[int, str], sluice.Database] = {}
_lock = threading.Lock()


def database(url: str) -> sluice.Database:
    """The Database of ``url`` in this process, opened on first use."""
    key = (os.getpid(), url)
    with _lock:
        found = _open.get(key)
        if found is None:
            found = _open[key] = sluice.connect(url)
        return found


@atexit.register
def close_databases() -> None:
    """Close this process's Databases (at exit, and in tests between projects)."""
    with _lock:
        mine = [key for key in _open if key[0] == os.getpid()]
        closing = [_open.pop(key) for key in mine]
    for db in closing:
        db.close()
