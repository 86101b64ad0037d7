"""A SQLite VFS that records what a disk would be asked to keep, and the disk a power cut
leaves: the power-cut simulation of tests/reliability/test_power_cut.py.

SQLite's own crash tests do this in C (test6.c): a VFS that knows which writes were
synced. Here the "powercut" VFS wraps the default "unix" one through ctypes. Every
call goes to the real file, so the process runs as usual; on the way, each xWrite,
xTruncate, xSync and xDelete of a named file is appended to ``Recorder.trace``, in the
order the process issued them. ``disk_at`` replays a prefix of that trace onto the
files as they were when recording began: a synced write is on the disk, an unsynced
one may be (a disk keeps any of its sectors, in any order) or not. A cut after the
k-th entry is then the state of the files had the power gone right there, without
killing anything: the one run's trace gives every cut point.

The stdlib ``_sqlite3`` links to the system's ``libsqlite3.so.0``, so the VFS
registered here through ``ctypes.CDLL`` is one the ``sqlite3`` module opens
(``sluice.connect("sqlite:///...?vfs=powercut")``).
"""

from __future__ import annotations

import ctypes
import os
import random
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

__all__ = [
    "NAME",
    "SECTOR",
    "Delete",
    "Mark",
    "Recorder",
    "Sync",
    "Truncate",
    "Write",
    "disk_at",
    "unavailable",
    "write_disk",
]

NAME = "powercut"
SECTOR = 512
"""What a disk writes atomically at best: an unsynced write may survive sector by sector."""

_OK, _IOERR = 0, 10
_P = ctypes.c_void_p
_INT = ctypes.c_int
_I64 = ctypes.c_int64


# --- records of the trace -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Write:
    path: str
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Truncate:
    path: str
    size: int


@dataclass(frozen=True, slots=True)
class Sync:
    path: str


@dataclass(frozen=True, slots=True)
class Delete:
    """Unix's xDelete syncs the directory when asked: taken as on the disk at once."""

    path: str


@dataclass(frozen=True, slots=True)
class Mark:
    """Not I/O: the workload's note of what it started or what returned, in the same order."""

    payload: Any


Entry = Write | Truncate | Sync | Delete | Mark


# --- SQLite's structs (sqlite3.h), as far as the VFS touches them ----------------------
_CLOSE = ctypes.CFUNCTYPE(_INT, _P)
_READ = ctypes.CFUNCTYPE(_INT, _P, _P, _INT, _I64)
_WRITE = ctypes.CFUNCTYPE(_INT, _P, _P, _INT, _I64)
_TRUNCATE = ctypes.CFUNCTYPE(_INT, _P, _I64)
_SYNC = ctypes.CFUNCTYPE(_INT, _P, _INT)
_FILE_SIZE = ctypes.CFUNCTYPE(_INT, _P, _P)
_LOCK = ctypes.CFUNCTYPE(_INT, _P, _INT)
_CHECK_LOCK = ctypes.CFUNCTYPE(_INT, _P, _P)
_FILE_CONTROL = ctypes.CFUNCTYPE(_INT, _P, _INT, _P)
_SECTOR_SIZE = ctypes.CFUNCTYPE(_INT, _P)
_SHM_MAP = ctypes.CFUNCTYPE(_INT, _P, _INT, _INT, _INT, _P)
_SHM_LOCK = ctypes.CFUNCTYPE(_INT, _P, _INT, _INT, _INT)
_SHM_BARRIER = ctypes.CFUNCTYPE(None, _P)
_SHM_UNMAP = ctypes.CFUNCTYPE(_INT, _P, _INT)
_FETCH = ctypes.CFUNCTYPE(_INT, _P, _I64, _INT, _P)
_UNFETCH = ctypes.CFUNCTYPE(_INT, _P, _I64, _P)


_IO_FIELDS: list[tuple[str, Any]] = [
    ("iVersion", _INT),
    ("xClose", _CLOSE),
    ("xRead", _READ),
    ("xWrite", _WRITE),
    ("xTruncate", _TRUNCATE),
    ("xSync", _SYNC),
    ("xFileSize", _FILE_SIZE),
    ("xLock", _LOCK),
    ("xUnlock", _LOCK),
    ("xCheckReservedLock", _CHECK_LOCK),
    ("xFileControl", _FILE_CONTROL),
    ("xSectorSize", _SECTOR_SIZE),
    ("xDeviceCharacteristics", _SECTOR_SIZE),
    ("xShmMap", _SHM_MAP),
    ("xShmLock", _SHM_LOCK),
    ("xShmBarrier", _SHM_BARRIER),
    ("xShmUnmap", _SHM_UNMAP),
    ("xFetch", _FETCH),
    ("xUnfetch", _UNFETCH),
]


class _IoMethods(ctypes.Structure):
    _fields_ = _IO_FIELDS


_OPEN = ctypes.CFUNCTYPE(_INT, _P, _P, _P, _INT, _P)
_DELETE = ctypes.CFUNCTYPE(_INT, _P, ctypes.c_char_p, _INT)


class _Vfs(ctypes.Structure):
    # Only the head is named: the rest (xAccess ... xNextSystemCall) is copied from
    # unix's struct as raw bytes, so those calls go straight to unix's C functions.
    _fields_: ClassVar = [
        ("iVersion", _INT),
        ("szOsFile", _INT),
        ("mxPathname", _INT),
        ("pNext", _P),
        ("zName", ctypes.c_char_p),
        ("pAppData", _P),
        ("xOpen", _OPEN),
        ("xDelete", _DELETE),
        ("rest", _P * 14),
    ]


# Our sqlite3_file is SQLite's header (a pointer to our methods) followed by unix's own
# sqlite3_file, which unix's xOpen fills in and every forwarded call is given.
_HEADER = ctypes.sizeof(_P)


def unavailable() -> str | None:
    """Why this process's ``sqlite3`` module cannot open files through the VFS (None: it can).

    A ``_sqlite3`` built with SQLite inside it never sees a VFS registered in the
    system's library."""
    try:
        ctypes.CDLL("libsqlite3.so.0")
    except OSError:
        return "no libsqlite3.so.0 to register a VFS in"
    maps = Path("/proc/self/maps")  # the sqlite3 module, imported, maps what it links
    if not maps.exists() or "/libsqlite3.so" not in maps.read_text():
        return f"the sqlite3 module has SQLite {sqlite3.sqlite_version} of its own"
    return None


class Recorder:
    """The registered VFS and its trace. One per process (``Recorder.install()``)."""

    _installed: ClassVar[Recorder | None] = None

    def __init__(self) -> None:
        self.trace: list[Entry] = []
        self.recording = False
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()  # SQLite calls in from any thread
        self._files: dict[int, str | None] = {}  # our sqlite3_file's address -> its path
        lib = ctypes.CDLL("libsqlite3.so.0")
        lib.sqlite3_vfs_find.restype = _P
        lib.sqlite3_vfs_find.argtypes = [ctypes.c_char_p]
        lib.sqlite3_vfs_register.argtypes = [_P, _INT]
        unix_address = lib.sqlite3_vfs_find(b"unix")
        if not unix_address:
            raise RuntimeError("SQLite has no 'unix' VFS to wrap")
        self._unix = _Vfs.from_address(unix_address)
        self._unix_address = unix_address
        # Kept referenced for the life of the process: SQLite holds the raw pointers.
        self._methods = self._io_methods()
        self._vfs = _Vfs.from_buffer_copy(self._unix)
        self._name = NAME.encode()
        self._vfs.zName = self._name
        self._vfs.pNext = None
        self._vfs.szOsFile = _HEADER + self._unix.szOsFile
        self._vfs.xOpen = self._open_callback = _OPEN(self._x_open)
        self._vfs.xDelete = self._delete_callback = _DELETE(self._x_delete)
        if lib.sqlite3_vfs_register(ctypes.byref(self._vfs), 0) != _OK:
            raise RuntimeError("sqlite3_vfs_register failed")

    @classmethod
    def install(cls) -> Recorder:
        """Register the VFS (once per process) and return its recorder."""
        if cls._installed is None:
            cls._installed = cls()
        return cls._installed

    def mark(self, payload: Any) -> None:
        """Put the workload's note in the trace, between the I/O before it and after it."""
        with self._lock:
            if self.recording:
                self.trace.append(Mark(payload))

    def sync_file(self, path: str) -> None:
        """Sync ``path`` as this VFS's xSync does, for a sync made outside SQLite: sluice
        syncs the WAL itself after a plain acknowledgement at FULL
        (sluice.backends.sqlite_sync, which the child gives this through
        ``register_sync``); recorded once the disk has it, as xSync's are."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
        self._record(Sync(os.path.realpath(path)))

    def _record(self, entry: Entry) -> None:
        with self._lock:
            if self.recording:
                self.trace.append(entry)

    # --- the VFS's own calls -----------------------------------------------------------
    def _x_open(self, _vfs: int, name: int | None, file: int, flags: int, out: int) -> int:
        try:
            real = file + _HEADER
            rc: int = self._unix.xOpen(self._unix_address, name, real, flags, out)
            if rc != _OK:
                _P.from_address(file).value = None  # SQLite then does not call xClose
                return rc
            # No name: a temporary file, gone after any crash; nothing to record.
            self._files[file] = ctypes.string_at(name).decode() if name else None
            _P.from_address(file).value = ctypes.addressof(self._methods)
            return _OK
        except BaseException as exc:
            return self._failed(exc)

    def _x_delete(self, _vfs: int, name: bytes, sync_dir: int) -> int:
        try:
            self._record(Delete(name.decode()))
            rc: int = self._unix.xDelete(self._unix_address, name, sync_dir)
            return rc
        except BaseException as exc:
            return self._failed(exc)

    def _failed(self, exc: BaseException) -> int:
        # A Python exception in a ctypes callback would be printed and the call return 0,
        # SQLITE_OK: say it failed instead, and let the test see why.
        self.errors.append(exc)
        return _IOERR

    # --- the file's calls: forwarded to unix's, the writes recorded on the way ----------
    @staticmethod
    def _real(file: int) -> tuple[int, _IoMethods]:
        real = file + _HEADER
        methods = _P.from_address(real).value
        assert methods is not None
        return real, _IoMethods.from_address(methods)

    def _io_methods(self) -> _IoMethods:
        def forward(name: str, kind: Any) -> Any:
            def call(file: int, *args: Any) -> Any:
                real, methods = self._real(file)
                return getattr(methods, name)(real, *args)

            return kind(call)

        methods = _IoMethods(iVersion=3)
        for name, kind in _IO_FIELDS[1:]:
            setattr(methods, name, forward(name, kind))
        methods.xClose = _CLOSE(self._x_close)
        methods.xWrite = _WRITE(self._x_write)
        methods.xTruncate = _TRUNCATE(self._x_truncate)
        methods.xSync = _SYNC(self._x_sync)
        # The -shm file and mapped pages are forwarded unchanged: the WAL index is rebuilt
        # from the WAL after a crash, and sluice leaves mmap off (reads go through xRead).
        return methods

    def _x_close(self, file: int) -> int:
        real, methods = self._real(file)
        self._files.pop(file, None)
        rc: int = methods.xClose(real)
        return rc

    def _x_write(self, file: int, data: int, amount: int, offset: int) -> int:
        try:
            path = self._files.get(file)
            if path is not None:
                self._record(Write(path, offset, ctypes.string_at(data, amount)))
            real, methods = self._real(file)
            rc: int = methods.xWrite(real, data, amount, offset)
            return rc
        except BaseException as exc:
            return self._failed(exc)

    def _x_truncate(self, file: int, size: int) -> int:
        try:
            path = self._files.get(file)
            if path is not None:
                self._record(Truncate(path, size))
            real, methods = self._real(file)
            rc: int = methods.xTruncate(real, size)
            return rc
        except BaseException as exc:
            return self._failed(exc)

    def _x_sync(self, file: int, flags: int) -> int:
        try:
            real, methods = self._real(file)
            rc: int = methods.xSync(real, flags)
            path = self._files.get(file)
            if rc == _OK and path is not None:  # recorded once the disk has it, not before
                self._record(Sync(path))
            return rc
        except BaseException as exc:
            return self._failed(exc)


# --- the disk after a power cut ----------------------------------------------------------
@dataclass
class _File:
    synced: bytearray
    unsynced: list[Write | Truncate] = field(default_factory=list)


def disk_at(
    start: dict[str, bytes], trace: Sequence[Entry], cut: int, rng: random.Random, keep: str
) -> dict[str, bytes]:
    """The files as a disk holds them when the power goes after ``trace[:cut]``.

    ``start``: each file's bytes when recording began. Synced writes are kept; each
    file's writes since its last sync are kept per ``keep``: ``"none"`` (the page cache
    was lost whole), ``"all"`` (the OS had written them all) or ``"some"`` (each sector
    of each write kept or not at random, as a disk that reorders and tears writes).
    """
    files = {path: _File(bytearray(data)) for path, data in start.items()}
    for entry in trace[:cut]:
        if isinstance(entry, Mark):
            continue
        if isinstance(entry, Delete):
            files.pop(entry.path, None)
            continue
        state = files.setdefault(entry.path, _File(bytearray()))
        if isinstance(entry, Sync):
            for change in state.unsynced:
                _apply(state.synced, change)
            state.unsynced.clear()
        else:
            state.unsynced.append(entry)
    disk = {}
    for path, state in files.items():
        image = bytearray(state.synced)
        for change in state.unsynced:
            if keep == "all":
                _apply(image, change)
            elif keep == "some":
                for piece in _sectors(change):
                    if rng.random() < 0.5:
                        _apply(image, piece)
        disk[path] = bytes(image)
    return disk


def _apply(image: bytearray, change: Write | Truncate) -> None:
    if isinstance(change, Truncate):
        del image[change.size :]
        return
    end = change.offset + len(change.data)
    if len(image) < change.offset:
        image.extend(bytes(change.offset - len(image)))  # a hole reads as zeros
    image[change.offset : end] = change.data


def _sectors(change: Write | Truncate) -> list[Write | Truncate]:
    """A write cut at sector boundaries (a truncation is one change, kept or not)."""
    if isinstance(change, Truncate):
        return [change]
    pieces: list[Write | Truncate] = []
    position = change.offset
    end = change.offset + len(change.data)
    while position < end:
        stop = min(end, (position // SECTOR + 1) * SECTOR)
        data = change.data[position - change.offset : stop - change.offset]
        pieces.append(Write(change.path, position, data))
        position = stop
    return pieces


def write_disk(disk: dict[str, bytes], directory: Path) -> None:
    """Lay the files out in ``directory`` under their own names (no -shm: it is rebuilt)."""
    for path, data in disk.items():
        (directory / Path(path).name).write_bytes(data)
