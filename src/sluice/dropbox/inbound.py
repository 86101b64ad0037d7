"""Files in: claimed from ``target/`` by a rename into ``processing/`` under a name that
carries the consumer's id, stored in the queue, then moved to ``processed/``.

Each file is stored exactly once, also when its consumer is killed at any step: the
backend's idempotency records (one per claimed file, keyed by its processing name
and identity) are claimed before the queue transaction, and the transaction that
enqueues the file's message also answers its record (an effect, so both commit or
neither). A file found in ``processing/`` after a restart whose record has an
answer was stored already and is only moved on; any other is stored. Two processes
that store the same file (one recovering what the other still works on) cannot both
commit: the second answer finds the record answered and its commit changes nothing.

Each entry's outcome is its own: one that cannot be stored (not a regular file, a
name sluice does not take, a body or a value its queue or the database refuses)
goes to ``error/`` with ``<name>.reason``, and the rest of its batch is stored.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice.backends.records import Effect
from sluice.dropbox.files import IN_THE_WAY, Directory, fits, kind_of, reason_name
from sluice.dropbox.layout import Box, OpenBox
from sluice.dropbox.metadata import body_of, kind_of_file, options_of
from sluice.dropbox.names import encode_value, parse_name
from sluice.dropbox.stats import DropboxStats
from sluice.engine.database import Engine
from sluice.errors import Conflict, ConnectionLost, MessageError, SluiceError, StorageError
from sluice.message import lone_surrogate

__all__ = ["BATCH", "Inbound"]

BATCH = 64
"""Files stored per queue transaction."""

_STORED = 201

log = logging.getLogger("sluice.dropbox")


@dataclass(frozen=True, slots=True)
class _File:
    """A claimed entry: where it is in processing/, and the name it came with.

    ``where`` is "" for ``processing/`` itself, or the consumer's own subdirectory
    ``processing/<id>~/`` that holds, under their own names, the files whose
    ``<id>~<name>`` would be longer than a file name may be.
    """

    where: str
    name: str
    original: str

    @property
    def key(self) -> str:
        return f"{self.where}/{self.name}" if self.where else self.name


@dataclass(slots=True)
class _Ready:
    file: _File
    key: str
    body: Any
    options: dict[str, Any]


class Inbound:
    """The inbound side of one Dropbox."""

    def __init__(
        self, db: Engine, consumer_id: str, *, keep_processed: bool, stats: DropboxStats
    ) -> None:
        self._db = db
        self._prefix = encode_value(consumer_id) + "~"
        self._keep = keep_processed
        self._stats = stats

    def ingest(self, box: Box, destination: str, limit: int | None) -> int:
        """Claim and store up to ``limit`` entries of ``target/``; the messages stored."""
        self._db.context.spec(destination)  # QueueNotFound before anything is claimed
        stored = 0
        with box.opened().all() as dirs:
            names = dirs["target"].names()
        if limit is not None:
            names = names[: max(limit, 0)]
        for start in range(0, len(names), BATCH):
            # Each batch opens its directories afresh: one swapped for a link since is
            # refused now, not written through.
            with box.opened().all() as dirs:
                claimed = [f for n in names[start : start + BATCH] if (f := self._claim(dirs, n))]
                stored += self._store(dirs, destination, claimed)
        return stored

    def recover(self, box: Box, destination: str) -> int:
        """Store (once) what this consumer left in ``processing/``; the messages stored."""
        self._db.context.spec(destination)
        with box.opened().all() as dirs:
            mine = self._mine(dirs)
        stored = 0
        for start in range(0, len(mine), BATCH):
            with box.opened().all() as dirs:
                stored += self._store(dirs, destination, mine[start : start + BATCH])
        return stored

    def _mine(self, dirs: OpenBox) -> list[_File]:
        """What this consumer claimed, in processing/ and in its own subdirectory."""
        prefix = self._prefix
        names = dirs["processing"].names()
        mine = [_File("", n, n[len(prefix) :]) for n in names if n.startswith(prefix)]
        if prefix in names:
            mine = [f for f in mine if f.name != prefix]
            found = dirs["processing"].lstat(prefix)
            if found is not None and stat.S_ISDIR(found.st_mode):
                mine += [_File(prefix, n, n) for n in dirs.sub("processing", prefix).names()]
            else:  # something else under the subdirectory's name: refused like any entry
                mine.append(_File("", prefix, prefix))
        return mine

    def _claim(self, dirs: OpenBox, name: str) -> _File | None:
        """Rename the entry into processing/ as ``<id>~<name>``; or, if that would be too
        long for a file name (not the bare name, DropboxMQ's way, which recovery cannot
        tell from another consumer's) or an entry of another kind has it, into the
        consumer's own ``processing/<id>~/`` under its own name. None: not claimed."""
        # A name that is not UTF-8 is listed with its bytes as surrogates (PEP 383):
        # ``fits`` measures the bytes it has on disk.
        ways = [_File("", self._prefix + name, name)] if fits(self._prefix + name) else []
        ways.append(_File(self._prefix, name, name))
        for claimed in ways:
            try:
                return claimed if self._rename_in(dirs, claimed) else None
            except OSError as exc:
                if exc.errno not in IN_THE_WAY or claimed is ways[-1]:
                    # Left in target/ (told once per round) until the cause is cleared.
                    log.warning("sluice.dropbox cannot claim %r: %s", name, exc.strerror)
                    return None
        return None

    def _rename_in(self, dirs: OpenBox, claimed: _File) -> bool:
        """False if another consumer won the race for the file."""
        holder = self._holder(dirs, claimed, make=True)
        return dirs["target"].rename(claimed.original, holder, claimed.name)

    def _holder(self, dirs: OpenBox, file: _File, *, make: bool = False) -> Directory:
        return dirs.sub("processing", file.where, make=make) if file.where else dirs["processing"]

    def _store(self, dirs: OpenBox, destination: str, files: Sequence[_File]) -> int:
        """Store each claimed file once, then move it on; the messages stored."""
        if not files:
            return 0
        now = self._db.clock.now()
        max_size = self._db.context.spec(destination).max_size
        kinds: dict[str, str | None] = {}
        ready: list[_Ready] = []
        for file in files:
            try:
                item = self._prepare(dirs, file, now, max_size, kinds)
            except MessageError as exc:
                self._fail(dirs, file, str(exc))
                continue
            if item is not None:
                ready.append(item)
        owner = f"dropbox:{dirs.box.path}"
        todo, done = self._claim_records(owner, ready, now)
        committed, failed, answered = self._commit_each(owner, destination, todo)
        for item, reason in failed:
            self._fail(dirs, item.file, reason)
        for item in [*done, *answered, *committed]:
            self._processed(dirs, item.file)
        self._tidy(dirs, files)
        return len(committed)

    def _prepare(
        self, dirs: OpenBox, file: _File, now: float, max_size: int, kinds: dict[str, str | None]
    ) -> _Ready | None:
        holder = self._holder(dirs, file)
        found = holder.lstat(file.name)
        if found is None:
            return None
        if not stat.S_ISREG(found.st_mode):
            raise MessageError(
                f"it is {kind_of(found.st_mode)}, not a regular file; drop a file (sluice "
                "follows no link)"
            )
        _check_name(file.original)
        meta = parse_name(file.original)
        if meta.expiration is not None and meta.expiration <= now * 1000:
            holder.place(file.name, dirs["expired"], file.original)
            return None
        body, content_type = body_of(kind_of_file(meta, file.original),
                                     holder.read(file.name, max_size))  # fmt: skip

        def type_kind(name: str) -> str | None:
            if name not in kinds:
                found = self._db.context.types.get(name)
                kinds[name] = None if found is None else found.kind
            return kinds[name]

        options = options_of(meta, content_type, now, type_kind)
        key = f"{file.key}:{found.st_ino}:{found.st_mtime_ns}:{found.st_size}"
        return _Ready(file, key, body, options)

    def _claim_records(
        self, owner: str, ready: list[_Ready], now: float
    ) -> tuple[list[_Ready], list[_Ready]]:
        """Those to store, and those stored before (a crash after the commit)."""
        backend = self._db.backend
        todo: list[_Ready] = []
        done: list[_Ready] = []
        for item in ready:
            if backend.idempotency_claim(owner, item.key, item.file.original, now):
                todo.append(item)
                continue
            found = backend.idempotency_find(owner, item.key)
            if found is not None and found.status is not None:
                done.append(item)
            elif found is not None or backend.idempotency_claim(
                owner, item.key, item.file.original, now
            ):
                todo.append(item)  # claimed before a crash, never stored
        return todo, done

    def _unanswered(self, owner: str, items: list[_Ready]) -> tuple[list[_Ready], list[_Ready]]:
        backend = self._db.backend
        todo: list[_Ready] = []
        done: list[_Ready] = []
        for item in items:
            found = backend.idempotency_find(owner, item.key)
            (done if found is not None and found.status is not None else todo).append(item)
        return todo, done

    def _commit_each(
        self, owner: str, destination: str, items: list[_Ready]
    ) -> tuple[list[_Ready], list[tuple[_Ready, str]], list[_Ready]]:
        """Commit the items' messages: those committed, those refused with the reason, and
        those another process stored meanwhile.

        One transaction for the batch; if the database refuses it for a value of one
        file (PostgreSQL's checks run at commit), each file is tried alone, so that
        only the file at fault is refused.
        """
        committed: list[_Ready] = []
        failed: list[tuple[_Ready, str]] = []
        answered: list[_Ready] = []
        todo = items
        while todo:
            try:
                ok, bad = self._commit(owner, destination, todo)
            except Conflict:
                # Another process stored some of them meanwhile: those are done.
                todo, done = self._unanswered(owner, todo)
                answered += done
                continue
            except SluiceError as exc:
                if not _refuses_data(exc):
                    raise
                if len(todo) == 1:
                    failed.append((todo[0], f"the database refused its message: {exc}"))
                else:
                    for item in todo:
                        ok, bad, done = self._commit_each(owner, destination, [item])
                        committed += ok
                        failed += bad
                        answered += done
                break
            committed += ok
            failed += bad
            break
        return committed, failed, answered

    def _commit(
        self, owner: str, destination: str, items: list[_Ready]
    ) -> tuple[list[_Ready], list[tuple[_Ready, str]]]:
        committed: list[_Ready] = []
        failed: list[tuple[_Ready, str]] = []
        with self._db.transaction() as tx:
            for item in items:
                try:
                    message_id = tx.enqueue(destination, item.body, **item.options)
                except MessageError as exc:
                    failed.append((item, str(exc)))
                    continue
                params = {"owner": owner, "key": item.key, "status": _STORED,
                          "answer": json.dumps(message_id)}  # fmt: skip
                tx.add_effect(Effect("idempotency_done", params, expect=1))
                committed.append(item)
        return committed, failed

    def _processed(self, dirs: OpenBox, file: _File) -> None:
        holder = self._holder(dirs, file)
        if self._keep:
            holder.place(file.name, dirs["processed"], file.original)
        else:
            holder.unlink(file.name)

    def _fail(self, dirs: OpenBox, file: _File, reason: str) -> None:
        """Move the entry itself (never what a link points to) to error/, with its reason."""
        placed = self._holder(dirs, file).place(file.name, dirs["error"], file.original)
        if placed is None:
            return
        dirs["error"].write_new(reason_name(placed), reason + "\n")
        self._stats.add("errors", 1)
        log.warning("sluice.dropbox moved %r to %s: %s", file.original, dirs["error"].path,
                    reason)  # fmt: skip

    def _tidy(self, dirs: OpenBox, files: Sequence[_File]) -> None:
        """Remove this consumer's subdirectory of processing/ once it is empty."""
        if any(f.where for f in files):
            with contextlib.suppress(OSError):  # not empty: a file in it is still claimed
                os.rmdir(self._prefix, dir_fd=dirs["processing"].fd)


def _check_name(name: str) -> None:
    """MessageError for a name sluice does not take (it goes to error/, once)."""
    if lone_surrogate(name) is not None:
        # Bytes that are not UTF-8 are listed as surrogates, which no database takes
        # (its idempotency record, the metadata).
        raise MessageError("the file name is not UTF-8; rename it in UTF-8 and drop it again")
    if "\\" in name:
        raise MessageError(
            "the file name holds a backslash, which sluice does not take in a name (a "
            "separator on Windows and SMB shares); rename it without one and drop it again"
        )


def _refuses_data(exc: SluiceError) -> bool:
    """Whether the database refused a value (the file's fault), rather than failed."""
    if isinstance(exc, MessageError):
        return True
    if not isinstance(exc, StorageError) or isinstance(exc, ConnectionLost):
        return False
    cause = exc.__cause__
    if isinstance(cause, sqlite3.DataError | sqlite3.IntegrityError):
        return True
    # PostgreSQL's SQLSTATE class 22, data exception (a NUL in text or jsonb, say).
    return str(getattr(cause, "sqlstate", "") or "").startswith("22")
