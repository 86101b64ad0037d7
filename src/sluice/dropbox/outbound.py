"""Messages out: each written into ``working/`` (fsync'd) and renamed into ``target/``,
where any program may claim it with ``mv``; acknowledged only after the rename.

A crash between the rename and the acknowledgement gives the message back to the
queue, and it is written again under the same file name (the name is made from the
message alone), replacing the first file if no program has taken it yet: a consumer
that took the first copy sees the message twice, with one name.
"""

from __future__ import annotations

import logging

from sluice.dropbox.layout import Box
from sluice.dropbox.metadata import contents_of, name_of
from sluice.dropbox.names import fit_name, parse_name
from sluice.dropbox.stats import DropboxStats
from sluice.engine.database import Engine
from sluice.errors import DropboxError, MessageError
from sluice.message import Message

__all__ = ["BATCH", "Outbound", "file_of"]

BATCH = 64
"""Messages written per queue transaction."""

log = logging.getLogger("sluice.dropbox")


def file_of(message: Message) -> tuple[str, bytes]:
    """A message's file name and contents: the same every time it is written."""
    name, _ = fit_name(name_of(message))
    return name, contents_of(message)


class Outbound:
    """The outbound side of one Dropbox."""

    def __init__(self, db: Engine, stats: DropboxStats) -> None:
        self._db = db
        self._stats = stats

    def emit(self, source: str, box: Box, limit: int | None, wait: float = 0.0) -> int:
        """Write up to ``limit`` of ``source``'s messages into the box; how many."""
        total = 0
        while limit is None or total < limit:
            take = BATCH if limit is None else min(BATCH, limit - total)
            with self._db.transaction() as tx:
                messages = tx.dequeue(source, limit=take, wait=wait)
                if messages:
                    self._write(box, messages)
            if not messages:
                break
            total += len(messages)
            wait = 0.0
        return total

    def expire(self, box: Box) -> int:
        """Move the files of ``target/`` whose expiration has passed to ``expired/``."""
        now_ms = self._db.clock.now() * 1000
        moved = 0
        with box.opened() as dirs:
            for name in dirs["target"].names():
                try:
                    expiration = parse_name(name).expiration
                except MessageError:
                    continue
                if expiration is not None and expiration <= now_ms:
                    dirs["target"].place(name, dirs["expired"], name)
                    moved += 1
        return moved

    def _write(self, box: Box, messages: list[Message]) -> None:
        files = [(self._name(m), contents_of(m)) for m in messages]
        written: list[str] = []
        # Opened now, from the root: a working/ or target/ swapped for a link since the
        # last batch is refused (DropboxError), and nothing is acknowledged.
        with box.opened() as dirs:
            try:
                for name, data in files:
                    written.append(name)
                    dirs["working"].create(name, data)
                for name, _ in files:
                    dirs["working"].rename(name, dirs["target"], name)
                dirs["target"].fsync()
            except OSError as exc:
                for name in written:
                    dirs["working"].unlink(name)
                raise DropboxError(
                    f"cannot write a message into {str(box.dir('target'))!r}: "
                    f"{exc.strerror or exc}; nothing was acknowledged (the messages stay in "
                    "the queue), free the space or fix the directory and emit again"
                ) from exc

    def _name(self, message: Message) -> str:
        name, dropped = fit_name(name_of(message))
        if dropped:
            self._stats.add("trimmed", 1)
            log.warning("sluice.dropbox writes message %s without its %s: the name would be "
                        "longer than %s", message.id, ", ".join(dropped), "255 bytes")  # fmt: skip
        return name
