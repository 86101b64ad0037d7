"""Messages out: each written into ``working/`` (fsync'd) and renamed into ``target/``,
where any program may claim it with ``mv``; acknowledged only after the rename.

A crash between the rename and the acknowledgement gives the message back to the
queue, and it is written again under the same file name (the name is made from the
message alone), replacing the first file if no program has taken it yet: a consumer
that took the first copy sees the message twice, with one name.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

from sluice.dropbox.files import fitting_name, fsync_dir, listing, move, write_durably
from sluice.dropbox.layout import Box
from sluice.dropbox.names import MessageName, parse_name
from sluice.engine.database import Engine
from sluice.errors import DropboxError, MessageError
from sluice.message import Message, encode_json, is_json

__all__ = ["BATCH", "Outbound", "file_of"]

BATCH = 64
"""Messages written per queue transaction."""


def file_of(message: Message) -> tuple[str, bytes]:
    """A message's file name and contents: the same every time it is written."""
    digest = int.from_bytes(hashlib.sha256(message.id.encode()).digest()[:8], "big") % 10**10
    millis = int(message.enqueued * 1000)
    kind, data = _contents(message)
    meta = MessageName(
        priority=message.priority,
        id=f"{millis}{message.position.seq % 1000:03d}-{digest:010d}",
        kind=kind,
        expiration=None if message.expires is None else int(message.expires * 1000),
        correlation=message.correlation_id,
        reply_to=None if message.reply_to is None else "Q" + message.reply_to,
        type=message.type,
        properties=message.properties,
    )
    return fitting_name(meta), data


def _contents(message: Message) -> tuple[str, bytes]:
    body = message.body
    if isinstance(body, bytes):
        return "B", body
    if is_json(message.content_type):
        return "M", encode_json(body).encode("utf-8")
    return "T", str(body).encode("utf-8")


class Outbound:
    """The outbound side of one Dropbox."""

    def __init__(self, db: Engine) -> None:
        self._db = db

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
        for name in listing(box.dir("target")):
            try:
                expiration = parse_name(name).expiration
            except MessageError:
                continue
            if expiration is not None and expiration <= now_ms:
                move(box, box.file("target", name), "expired", name)
                moved += 1
        return moved

    def _write(self, box: Box, messages: list[Message]) -> None:
        written: list[Path] = []
        try:
            files = [file_of(m) for m in messages]
            for name, data in files:
                path = box.file("working", name)
                written.append(path)
                write_durably(path, data)
            for name, _ in files:
                os.replace(box.file("working", name), box.file("target", name))
            fsync_dir(box.dir("target"))
        except OSError as exc:
            for path in written:
                _remove(path)
            raise DropboxError(
                f"cannot write a message into {str(box.dir('target'))!r}: {exc.strerror or exc}; "
                "nothing was acknowledged (the messages stay in the queue), free the space or "
                "fix the directory and emit again"
            ) from exc


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
