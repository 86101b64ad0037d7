"""The file operations of a dropbox, each through a directory file descriptor so that no
read, write, rename or listing ever follows a symbolic link.

A ``Directory`` is opened one path component at a time from the root, each with
``O_DIRECTORY | O_NOFOLLOW``: a state directory swapped for a link is refused when
it is next opened (every round of work opens its directories afresh), and while a
round holds one open, its operations go to the directory that was checked, whatever
its path has become since. Files are opened by name relative to that descriptor with
``O_NOFOLLOW``, and files sluice creates with ``O_CREAT | O_EXCL`` as well: an entry
planted under the name (a link to a file outside the root) is replaced by a rename,
never written through.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from pathlib import Path
from types import TracebackType

from sluice.dropbox.names import MAX_NAME, parse_name
from sluice.errors import DropboxError, MessageError

__all__ = [
    "IN_THE_WAY",
    "MAX_NAME",
    "Directory",
    "fits",
    "kind_of",
    "listing_order",
    "make_directories",
    "open_directory",
    "reason_name",
    "size",
]

log = logging.getLogger("sluice.dropbox")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# Non-blocking: opening a FIFO planted under a file's name must not wait for a writer.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# What a rename onto an entry of the wrong kind (a directory under the name) says.
IN_THE_WAY = {errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST}


def size(name: str) -> int:
    """Bytes of ``name`` on disk; past MAX_NAME for one no file system holds (a lone
    surrogate that no bytes decode to)."""
    try:
        return len(os.fsencode(name))
    except UnicodeEncodeError:
        return MAX_NAME + 1


def fits(name: str) -> bool:
    """Whether ``name`` can be a file name."""
    return size(name) <= MAX_NAME


def kind_of(mode: int) -> str:
    """What an entry that is not a regular file is, for a reason the user reads."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def listing_order(name: str) -> tuple[int, int, str]:
    """DropboxMQ's order: priority first (highest), then the id's timestamp and sequence,
    then the name; a name whose metadata is refused sorts as the defaults."""
    try:
        meta = parse_name(name)
    except MessageError:  # it goes to error/ when claimed, in any order
        return (0, 0, name)
    return (-meta.priority, meta.timestamp, name)


def open_directory(root: Path, parts: tuple[str, ...]) -> Directory:
    """``root/parts...`` opened without following a link below the root; DropboxError
    if one of them is missing, a link or not a directory."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise _refused(root, exc) from None
    path = root
    try:
        for part in parts:
            path = path / part
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _refused(path, exc) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return Directory(fd, path)


def make_directories(root: Path, parts: tuple[str, ...]) -> None:
    """``mkdir -p root/parts...`` without following a link below the root; DropboxError
    if one of them is a link (or not a directory)."""
    for n in range(len(parts)):
        with open_directory(root, parts[:n]) as parent, contextlib.suppress(FileExistsError):
            os.mkdir(parts[n], 0o755, dir_fd=parent.fd)
    open_directory(root, parts).close()  # the last one, there already, may be a link


def _refused(path: Path, exc: OSError) -> DropboxError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return DropboxError(
            f"the dropbox directory {str(path)!r} is a symbolic link or not a directory; "
            "sluice follows no link below the root: remove it (sluice makes the directory)"
        )
    return DropboxError(f"the dropbox directory {str(path)!r} cannot be opened: {exc.strerror}")


class Directory:
    """An open directory: the operations sluice does on the files in it, by name."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        """For messages only: the operations go through ``fd``."""

    def __enter__(self) -> Directory:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def names(self) -> list[str]:
        """The entries' names, in DropboxMQ's order (only the names are read)."""
        return sorted(os.listdir(self.fd), key=listing_order)

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry itself (never a link's target); None if it is gone."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def subdirectory(self, name: str) -> Directory:
        """An entry that must be a directory, not a link to one."""
        try:
            return Directory(os.open(name, _DIR_FLAGS, dir_fd=self.fd), self.path / name)
        except OSError as exc:
            raise _refused(self.path / name, exc) from None

    def make_subdirectory(self, name: str) -> Directory:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=self.fd)
        return self.subdirectory(name)

    def read(self, name: str, max_size: int) -> bytes:
        """A regular file's bytes; MessageError if it is not one (a link is not followed)
        or is larger than ``max_size`` (read no further than that)."""
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise MessageError("it is a symbolic link; drop the file itself") from None
            raise MessageError(f"the file cannot be read: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise MessageError(f"it is {kind_of(mode)}, not a regular file; drop a file")
            data = f.read(max_size + 1)
        if len(data) > max_size:
            raise MessageError(
                f"the file is over this queue's limit of {max_size} bytes; send a reference "
                "to the data, or raise the queue's max_size"
            )
        return data

    def create(self, name: str, data: bytes) -> None:
        """A new file ``name`` holding ``data``, fsync'd. Whatever had the name (a file
        left by a crash, a planted link) is removed first, never written through."""
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
            os.unlink(name, dir_fd=self.fd)
        fd = os.open(name, _CREATE_FLAGS, 0o644, dir_fd=self.fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def unlink(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    def rename(self, name: str, to: Directory, new: str) -> bool:
        """Move the entry ``name`` (itself, whatever it is) to ``to`` as ``new``, replacing
        a file there; False if it is gone (another process moved it)."""
        try:
            os.rename(name, new, src_dir_fd=self.fd, dst_dir_fd=to.fd)
        except FileNotFoundError:
            return False
        return True

    def place(self, name: str, to: Directory, new: str) -> str | None:
        """``rename``, under another name if an entry of another kind (a directory) is in
        the way of ``new``; the name it has now, None if it was gone."""
        try:
            return new if self.rename(name, to, new) else None
        except OSError as exc:
            if exc.errno not in IN_THE_WAY:
                raise
        other = _beside(new)
        log.warning("sluice.dropbox: %r is in the way in %s; moved there as %r", new, to.path,
                    other)  # fmt: skip
        return other if self.rename(name, to, other) else None

    def write_new(self, name: str, text: str) -> None:
        """Replace ``name`` with a file holding ``text``: written under a fresh name (so
        no planted entry is written through) then renamed over whatever has the name."""
        scratch = f".sluice-{secrets.token_hex(8)}"
        self.create(scratch, text.encode("utf-8", "surrogateescape"))
        try:
            if self.place(scratch, self, name) is None:
                raise DropboxError(f"{scratch!r} vanished from {str(self.path)!r} as it was made")
        except BaseException:
            self.unlink(scratch)
            raise

    def fsync(self) -> None:
        """Make the renames into this directory durable."""
        os.fsync(self.fd)


def _beside(name: str) -> str:
    """Another name for ``name``, of at most MAX_NAME bytes."""
    suffix = "." + secrets.token_hex(4)
    stem = name
    while size(stem + suffix) > MAX_NAME:
        stem = stem[:-1]
    return stem + suffix


def reason_name(name: str) -> str:
    """The name of the file saying why ``name`` went to error/, cut (by its bytes on disk)
    so that it fits: a name of 255 bytes has its reason under a shorter stem."""
    stem = name
    while size(stem + ".reason") > MAX_NAME:
        stem = stem[:-1]
    return stem + ".reason"
