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
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice.backends.records import Effect
from sluice.dropbox.files import listing, move, read_file, write_reason
from sluice.dropbox.layout import MAX_NAME, Box
from sluice.dropbox.names import encode_value, parse_name
from sluice.engine.database import Engine
from sluice.errors import Conflict, MessageError
from sluice.message import JSON, OCTETS, TEXT, decode_json, lone_surrogate

__all__ = ["BATCH", "Inbound"]

BATCH = 64
"""Files stored per queue transaction."""

_STORED = 201


@dataclass(frozen=True, slots=True)
class _File:
    """A claimed file: its name in processing/ and the name it came with."""

    processing: str
    original: str


@dataclass(slots=True)
class _Ready:
    file: _File
    key: str
    body: Any
    options: dict[str, Any]


class Inbound:
    """The inbound side of one Dropbox."""

    def __init__(self, db: Engine, consumer_id: str, *, keep_processed: bool) -> None:
        self._db = db
        self._prefix = encode_value(consumer_id) + "~"
        self._keep = keep_processed

    def ingest(self, box: Box, destination: str, limit: int | None) -> int:
        """Claim and store up to ``limit`` files of ``target/``; the messages stored."""
        stored = 0
        names = listing(box.dir("target"))
        if limit is not None:
            names = names[: max(limit, 0)]
        for start in range(0, len(names), BATCH):
            claimed = [f for n in names[start : start + BATCH] if (f := self._claim(box, n))]
            stored += self._store(box, destination, claimed)
        return stored

    def recover(self, box: Box, destination: str) -> int:
        """Store (once) what this consumer left in ``processing/``; the messages stored."""
        mine = [
            _File(n, n[len(self._prefix) :])
            for n in listing(box.dir("processing"))
            if n.startswith(self._prefix)
        ]
        return sum(
            self._store(box, destination, mine[i : i + BATCH]) for i in range(0, len(mine), BATCH)
        )

    def _claim(self, box: Box, name: str) -> _File | None:
        processing = self._prefix + name
        # A name that is not UTF-8 is listed with its bytes as surrogates (PEP 383):
        # measured as the bytes it has on disk, as layout.check_file_name measures it.
        if len(processing.encode("utf-8", "surrogateescape")) > MAX_NAME:
            # As DropboxMQ: the bare name, which two consumers on NFS might both win.
            processing = name
        try:
            os.rename(box.file("target", name), box.file("processing", processing))
        except FileNotFoundError:
            return None  # another consumer won the race
        return _File(processing, name)

    def _store(self, box: Box, destination: str, files: Sequence[_File]) -> int:
        """Store each claimed file once, then move it on; the messages stored."""
        if not files:
            return 0
        now = self._db.clock.now()
        max_size = self._db.context.spec(destination).max_size
        ready: list[_Ready] = []
        for file in files:
            try:
                item = self._prepare(box, file, now, max_size)
            except MessageError as exc:
                self._fail(box, file, str(exc))
                continue
            if item is not None:
                ready.append(item)
        owner = self._owner(box)
        todo, done = self._claim_records(owner, ready, now)
        stored = 0
        while todo:
            try:
                committed, failed = self._commit(owner, destination, todo)
            except Conflict:
                # Another process stored some of them meanwhile: those are done.
                todo, answered = self._unanswered(owner, todo)
                done += answered
                continue
            for item, reason in failed:
                self._fail(box, item.file, reason)
            done += committed
            stored += len(committed)
            break
        for item in done:
            path = box.file("processing", item.file.processing)
            move(box, path, "processed", item.file.original, keep=self._keep)
        return stored

    def _owner(self, box: Box) -> str:
        return f"dropbox:{box.path}"

    def _prepare(self, box: Box, file: _File, now: float, max_size: int) -> _Ready | None:
        path = box.file("processing", file.processing)
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(found.st_mode):
            raise MessageError("the file is a symbolic link; drop the file itself")
        if lone_surrogate(file.processing) is not None:
            # Bytes that are not UTF-8 are listed as surrogates, which no database takes
            # (its idempotency record, the metadata): to error/, not a crash.
            raise MessageError("the file name is not UTF-8; rename it in UTF-8 and drop it again")
        meta = parse_name(file.original)
        if meta.expiration is not None and meta.expiration <= now * 1000:
            move(box, path, "expired", file.original)
            return None
        body, content_type = _body(meta.kind, read_file(path, max_size))
        options: dict[str, Any] = {"content_type": content_type, "priority": meta.priority}
        if meta.properties:
            options["properties"] = meta.properties
        if meta.expiration is not None:
            options["ttl"] = meta.expiration / 1000 - now
        if meta.correlation:
            options["correlation_id"] = meta.correlation
        if meta.reply_destination:
            options["reply_to"] = meta.reply_destination
        if meta.type:
            options["type"] = meta.type
        key = f"{file.processing}:{found.st_ino}:{found.st_mtime_ns}:{found.st_size}"
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

    def _fail(self, box: Box, file: _File, reason: str) -> None:
        write_reason(box, file.original, reason)
        move(box, box.file("processing", file.processing), "error", file.original)


def _body(kind: str, data: bytes) -> tuple[Any, str]:
    """A file's body as its class letter says it is."""
    if kind == "B":
        return data, OCTETS
    if kind == "M":
        try:
            return decode_json(data.decode("utf-8")), JSON
        except (UnicodeDecodeError, ValueError) as exc:
            raise MessageError(f"its class M says JSON, but it is not: {exc}") from None
    if kind in ("O", "S"):
        what = "a Java object" if kind == "O" else "a JMS stream"
        raise MessageError(
            f"its class {kind} ({what}) cannot be stored in sluice; send it as B (bytes)"
        )
    try:
        return data.decode("utf-8"), TEXT
    except UnicodeDecodeError as exc:
        raise MessageError(f"its class T says UTF-8 text, but it is not: {exc}") from None
