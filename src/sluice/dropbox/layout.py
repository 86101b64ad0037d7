"""Where a dropbox's files live, as DropboxMQ lays them out, and the checks that keep
every path sluice touches inside the root.

A queue ``q``: ``<root>/q/incoming/{working,target,processing,processed,expired,error}``.
A topic ``a.b.c``: ``<root>/topic-root/a/b/c/.incoming/`` (files published to the
topic) and ``.subscriptions/<enc(subscription)>/`` (a copy for each subscription),
each with the same six directories.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sluice.dropbox.names import encode_value
from sluice.errors import DropboxError

__all__ = ["MAX_NAME", "STATES", "TOPIC_ROOT", "Box", "Layout", "check_file_name"]

TOPIC_ROOT = "topic-root"
STATES = ("working", "target", "processing", "processed", "expired", "error")
MAX_NAME = 255
"""Bytes in a file name: the limit of ext4, XFS, NFS and SMB alike."""


def _check_segment(segment: str, what: str) -> str:
    if (
        not segment
        or segment in (".", "..")
        or "/" in segment
        or "\\" in segment
        or "\0" in segment
        or _size(segment) > MAX_NAME
    ):
        raise DropboxError(
            f"{what} {segment!r} cannot be a directory name in a dropbox root: use a name "
            f"without '/', '\\', NUL or lone surrogates, of 1 to {MAX_NAME} bytes and not "
            "'.' or '..'"
        )
    return segment


def _size(segment: str) -> int:
    """Bytes of ``segment`` as a file name; past MAX_NAME for one no file system holds."""
    try:
        return len(segment.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:  # a lone surrogate that no bytes on disk decode to
        return MAX_NAME + 1


def check_file_name(name: str) -> str:
    """A file name listed in a directory that sluice may open or rename: no separators,
    no NUL, not '.' or '..', not over-long."""
    return _check_segment(name, "the file name")


@dataclass(frozen=True, slots=True)
class Box:
    """One dropbox: its six directories."""

    path: Path

    def dir(self, state: str) -> Path:
        """One of ``STATES``."""
        return self.path / state

    def file(self, state: str, name: str) -> Path:
        """A file of one of its directories, by a name checked not to leave it."""
        return self.path / state / check_file_name(name)


class Layout:
    """The dropboxes under one root directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise DropboxError(f"the dropbox root {str(root)!r} is not a directory; create it")

    def queue(self, queue: str) -> Box:
        """The dropbox of a queue, made if missing."""
        if _check_segment(queue, "the queue name") == TOPIC_ROOT:
            raise DropboxError(f"a queue named {TOPIC_ROOT!r} would be the topics' directory")
        return self._made(self.root / queue / "incoming")

    def topic_incoming(self, topic: str) -> Box:
        """Where files published to ``topic`` are dropped, made if missing."""
        return self._made(self._topic_dir(topic) / ".incoming")

    def subscription(self, topic: str, subscription: str) -> Box:
        """Where ``subscription``'s copies of ``topic``'s messages go, made if missing."""
        try:
            encoded = encode_value(subscription)
        except UnicodeEncodeError:  # a lone surrogate: no queue's name, and no file's
            raise DropboxError(
                f"the subscription name {subscription!r} is not valid Unicode; "
                "no subscription has that name"
            ) from None
        name = _check_segment(encoded, "the subscription name")
        return self._made(self._topic_dir(topic) / ".subscriptions" / name)

    def _topic_dir(self, topic: str) -> Path:
        parts = [_check_segment(p, f"the topic {topic!r}'s part") for p in topic.split(".")]
        if any(p.startswith(".") for p in parts):
            raise DropboxError(
                f"the topic {topic!r} has a part that starts with '.', which would be "
                "mistaken for a topic's .incoming or .subscriptions directory"
            )
        return self.root.joinpath(TOPIC_ROOT, *parts)

    def _made(self, path: Path) -> Box:
        # Checked before anything is made as well as after: made first, the directories
        # were made through a link, outside the root, before the check refused it.
        for state in STATES:
            self._inside(path / state)
            (path / state).mkdir(parents=True, exist_ok=True)
        real = self._inside(path)
        for state in STATES:
            self._inside(real / state)
        return Box(real)

    def _inside(self, path: Path) -> Path:
        """``path`` resolved (as far as it exists), if that is inside the root."""
        real = path.resolve()
        if not real.is_relative_to(self.root):
            raise DropboxError(
                f"the dropbox {str(path)!r} leads outside the root {str(self.root)!r} "
                "(a symbolic link); remove the link"
            )
        return real
