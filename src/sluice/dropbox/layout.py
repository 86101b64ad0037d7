"""Where a dropbox's files live, as DropboxMQ lays them out, and the checks that keep
every path sluice touches inside the root (no link below it is followed).

A queue ``q``: ``<root>/q/incoming/{working,target,processing,processed,expired,error}``.
A topic ``a.b.c``: ``<root>/topic-root/a/b/c/.incoming/`` (files published to the
topic) and ``.subscriptions/<enc(subscription)>/`` (a copy for each subscription),
each with the same six directories.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sluice.dropbox.files import MAX_NAME, Directory, make_directories, open_directory, size
from sluice.dropbox.names import encode_value
from sluice.errors import DropboxError

__all__ = ["STATES", "TOPIC_ROOT", "Box", "Layout", "OpenBox"]

TOPIC_ROOT = "topic-root"
STATES = ("working", "target", "processing", "processed", "expired", "error")


def _check_segment(segment: str, what: str) -> str:
    if (
        not segment
        or segment in (".", "..")
        or "/" in segment
        or "\\" in segment
        or "\0" in segment
        or size(segment) > MAX_NAME
    ):
        raise DropboxError(
            f"{what} {segment!r} cannot be a directory name in a dropbox root: use a name "
            f"without '/', '\\', NUL or lone surrogates, of 1 to {MAX_NAME} bytes and not "
            "'.' or '..'"
        )
    return segment


@dataclass(frozen=True, slots=True)
class Box:
    """One dropbox: its six directories, ``root/parts.../<state>``."""

    root: Path
    parts: tuple[str, ...]

    @property
    def path(self) -> Path:
        """Its path, to show and to name it by: every operation goes through ``open``."""
        return self.root.joinpath(*self.parts)

    def dir(self, state: str) -> Path:
        """One of ``STATES``, as a path to show (inotify watches it as a hint only)."""
        return self.path / state

    def open(self, state: str) -> Directory:
        """One of ``STATES``, opened now from the root without following a link."""
        return open_directory(self.root, (*self.parts, state))

    def opened(self) -> OpenBox:
        """Its directories, each opened (afresh) when first used, until the block ends."""
        return OpenBox(self)


class OpenBox:
    """A box's directories for one round of work: opened when first used (from the
    root, refusing links), closed together at the end of the round."""

    def __init__(self, box: Box) -> None:
        self.box = box
        self._open: dict[str, Directory] = {}

    def __enter__(self) -> OpenBox:
        return self

    def all(self) -> OpenBox:
        """Every state's directory opened now, so that one swapped for a link is refused
        before anything is moved (not halfway through a round)."""
        try:
            for state in STATES:
                self[state]
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for directory in self._open.values():
            directory.close()
        self._open.clear()

    def __getitem__(self, state: str) -> Directory:
        found = self._open.get(state)
        if found is None:
            found = self._open[state] = self.box.open(state)
        return found

    def sub(self, state: str, name: str, *, make: bool = False) -> Directory:
        """A directory inside one of the states' (made if ``make``), never a link."""
        key = f"{state}/{name}"
        found = self._open.get(key)
        if found is None:
            parent = self[state]
            found = parent.make_subdirectory(name) if make else parent.subdirectory(name)
            self._open[key] = found
        return found


class Layout:
    """The dropboxes under one root directory.

    The root is resolved once (it may be a link the user chose); nothing below it is
    ever followed through a link: each round of work opens the directories it uses
    from the root, one component at a time (sluice.dropbox.files).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise DropboxError(f"the dropbox root {str(root)!r} is not a directory; create it")

    def check(self, name: str, *, topic: bool = False) -> None:
        """DropboxError if a queue's (or a topic's) name cannot be directories under the
        root; nothing is made."""
        if topic:
            self._topic_parts(name)
        else:
            self._queue_parts(name)

    def queue(self, queue: str) -> Box:
        """The dropbox of a queue, made if missing."""
        return self._made(self._queue_parts(queue))

    def _queue_parts(self, queue: str) -> tuple[str, ...]:
        if _check_segment(queue, "the queue name") == TOPIC_ROOT:
            raise DropboxError(f"a queue named {TOPIC_ROOT!r} would be the topics' directory")
        return (queue, "incoming")

    def topic_incoming(self, topic: str) -> Box:
        """Where files published to ``topic`` are dropped, made if missing."""
        return self._made((*self._topic_parts(topic), ".incoming"))

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
        return self._made((*self._topic_parts(topic), ".subscriptions", name))

    def _topic_parts(self, topic: str) -> tuple[str, ...]:
        parts = [_check_segment(p, f"the topic {topic!r}'s part") for p in topic.split(".")]
        if any(p.startswith(".") for p in parts):
            raise DropboxError(
                f"the topic {topic!r} has a part that starts with '.', which would be "
                "mistaken for a topic's .incoming or .subscriptions directory"
            )
        return (TOPIC_ROOT, *parts)

    def _made(self, parts: tuple[str, ...]) -> Box:
        # Made one component at a time through directory descriptors: a link anywhere
        # below the root is refused (DropboxError) before anything is made through it.
        for state in STATES:
            make_directories(self.root, (*parts, state))
        return Box(self.root, parts)
