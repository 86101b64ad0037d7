"""``DropboxStats``: the counts of a dropbox, for progress lines and for tests."""

from __future__ import annotations

import threading

__all__ = ["DropboxStats"]


class DropboxStats:
    """Counts of a dropbox, added to by its threads and read by a progress timer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stored = 0
        """Files stored as messages (by ``run``)."""
        self.written = 0
        """Messages written out as files (by ``run``)."""
        self.failures = 0
        """Rounds that failed and were tried again after the poll interval."""
        self.errors = 0
        """Files (or other entries) moved to ``error/``, each with its reason."""
        self.trimmed = 0
        """Files written with some of their message's metadata left out of the name (too
        long for one; the rule is sluice.dropbox.names.fit_name's)."""

    def add(self, what: str, count: int) -> None:
        """Add ``count`` to one of the counts."""
        if count:
            with self._lock:
                setattr(self, what, getattr(self, what) + count)

    def as_dict(self) -> dict[str, int]:
        return {
            "stored": self.stored,
            "written": self.written,
            "failures": self.failures,
            "errors": self.errors,
            "trimmed": self.trimmed,
        }
