"""The file operations of a dropbox: listing a directory in DropboxMQ's order, reading
a file without following links, writing one durably, moving one on."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from sluice.dropbox.layout import MAX_NAME, Box, check_file_name
from sluice.dropbox.names import MessageName, parse_name
from sluice.errors import DropboxError, MessageError

__all__ = [
    "fitting_name",
    "fsync_dir",
    "listing",
    "move",
    "read_file",
    "write_durably",
    "write_reason",
]

log = logging.getLogger("sluice.dropbox")


def _order(name: str) -> tuple[int, int, str]:
    try:
        meta = parse_name(name)
    except MessageError:  # a bad property: it goes to error/ when claimed, in any order
        return (0, 0, name)
    return (-meta.priority, meta.timestamp, name)


def listing(directory: Path) -> list[str]:
    """The names in ``directory`` as DropboxMQ takes them: priority first (highest), then
    the id's timestamp and sequence, then the name. Only the names are read."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted((n for n in names if _acceptable(n)), key=_order)


def _acceptable(name: str) -> bool:
    try:
        check_file_name(name)
    except DropboxError:
        log.warning("sluice.dropbox skips the file name %r in a dropbox", name)
        return False
    return True


def read_file(path: Path, max_size: int) -> bytes:
    """A regular file's bytes, never through a symbolic link; MessageError if it is not
    a regular file or is larger than ``max_size`` (read no further than that)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if os.path.islink(path):
            raise MessageError("the file is a symbolic link; drop the file itself") from None
        raise MessageError(f"the file cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise MessageError("it is not a regular file; drop a file")
        data = f.read(max_size + 1)
    if len(data) > max_size:
        raise MessageError(
            f"the file is over this queue's limit of {max_size} bytes; send a reference to "
            "the data, or raise the queue's max_size"
        )
    return data


def write_durably(path: Path, data: bytes) -> None:
    """Create (or overwrite) ``path`` with ``data`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Make the renames into ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def move(box: Box, source: Path, state: str, name: str, *, keep: bool = True) -> None:
    """Move a file to the box's ``state`` directory as ``name`` (or remove it if not
    ``keep``); a file gone already (another process moved it) is left alone."""
    try:
        if keep:
            os.replace(source, box.file(state, name))
        else:
            os.unlink(source)
    except FileNotFoundError:
        pass


def write_reason(box: Box, name: str, reason: str) -> None:
    """Why the file ``name`` went to error/: ``error/<name>.reason`` beside it."""
    # Cut by the bytes of the name on disk, not its characters: a name of 255 bytes in
    # multibyte characters made a reason file's name over the limit, and the file
    # stayed in processing/ (each recover failed on it again).
    stem = name
    while len(os.fsencode(stem)) > MAX_NAME - len(".reason"):
        stem = stem[:-1]
    box.file("error", stem + ".reason").write_text(reason + "\n", "utf-8")


def fitting_name(meta: MessageName) -> str:
    """The file name of ``meta``, its optional fields dropped from the end while it is
    longer than a file name may be (with a warning: the metadata is lost)."""
    name = meta.format()
    fields = name.split(".")
    while len(name.encode()) > MAX_NAME and len(fields) > 3:
        fields.pop()
        name = ".".join(fields)
        log.warning("sluice.dropbox drops a field of an over-long file name for %s", meta.id)
    return name
