"""The SQLite backend's statements and the small rules around them: loading, which
statement a commit's parts take, and the translation of driver errors by result code."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from sluice import sql
from sluice.backends.records import MESSAGE_COLUMNS, Duplicate, Envelope
from sluice.errors import QueueNotFound, StorageError
from sluice.message import MessageState

__all__ = [
    "capped_limit",
    "delete_held",
    "ids",
    "is_busy",
    "keep_held",
    "load_queries",
    "queue_not_found",
    "translate",
    "typed",
]


def load_queries() -> tuple[dict[str, str], dict[str, sql.Template]]:
    """The statements ready to run, and the templates selections and properties fill."""
    # The schema stores application/json as NULL; rows read back carry it spelled out.
    spelled = {"content_type": "coalesce(content_type, 'application/json') AS content_type"}
    columns = [spelled.get(c, c) for c in MESSAGE_COLUMNS]
    # A batch claim's select: the state its rows have once mark_claimed has run.
    claimed = [f"{int(MessageState.CLAIMED)} AS state" if c == "state" else c for c in columns]
    given = {"message_columns": ", ".join(columns), "claimed_columns": ", ".join(claimed)}
    return sql.statements("sqlite", fragments=given), sql.templates("sqlite", fragments=given)


def typed(envelope: Envelope) -> bool:
    """Whether the envelope needs the full insert (a type, properties, a group or lane)."""
    return (
        envelope.type is not None
        or envelope.keys is not None
        or envelope.group is not None
        or envelope.lane is not None
    )


def delete_held(key: dict[str, object], held: Sequence[int]) -> tuple[str, dict[str, object]]:
    """The query that deletes a transaction's held messages, and its parameters."""
    if len(held) == 1:  # by id: json_each costs a tenth of a cycle for one message
        return "delete_claimed_one", key | {"id": held[0]}
    return "delete_claimed", key | {"ids": ids(held)}


def keep_held(
    key: dict[str, object], kept: Sequence[int], settled_at: float
) -> tuple[str, dict[str, object]]:
    """The query that keeps a transaction's settled messages as done, and its parameters."""
    if len(kept) == 1:
        return "keep_claimed_one", key | {"id": kept[0], "settled_at": settled_at}
    return "keep_claimed", key | {"ids": ids(kept), "settled_at": settled_at}


def capped_limit(conn: sqlite3.Connection, query: str, queue: str, limit: int) -> int:
    """How many of ``limit`` a claim may take from a queue with max_in_flight.

    ``query`` is queue_credit; run it in the claim's own BEGIN IMMEDIATE transaction.
    """
    row = conn.execute(query, {"queue": queue}).fetchone()
    if row is None or row[0] is None:  # gone, or uncapped meanwhile
        return limit
    return max(0, min(limit, int(row[0])))


def ids(refs: Sequence[int]) -> str:
    # Bound as one JSON array and expanded by json_each: one statement for any count.
    return "[" + ",".join(map(str, refs)) + "]"


def queue_not_found(names: Sequence[str]) -> QueueNotFound:
    return QueueNotFound(f"queue {', '.join(map(repr, names))} does not exist")


_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
_UNIQUE = (sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)


def is_busy(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in _BUSY


def translate(exc: sqlite3.Error, path: str, *, closed: bool) -> StorageError:
    """The sluice error for a driver error, by SQLite's (extended) result code."""
    code = getattr(exc, "sqlite_errorcode", None)
    if closed:
        return StorageError("the database connection is closed; call sluice.connect again")
    if code in _UNIQUE:
        return Duplicate(f"{path}: {exc}")
    if code is not None and code & 0xFF in _BUSY:
        return StorageError(
            f"{path} stayed locked by another connection past busy_timeout ({exc}); "
            "retry, or raise busy_timeout"
        )
    return StorageError(f"SQLite failed on {path}: {exc}")
