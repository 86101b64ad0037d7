"""The SQLite dialect's parts of the rules engine's unit of work (backends/rules.py):
enqueues inside the unit, and the SQL that builds bodies and made messages (SQLite's JSON
functions)."""

from __future__ import annotations

import sqlite3
from abc import abstractmethod
from collections.abc import Sequence

from sluice.backends.records import Envelope
from sluice.backends.rules import SqlRules
from sluice.backends.sqlite_statements import ids
from sluice.errors import StorageError
from sluice.message import TEXT, MessageState

__all__ = ["SQLiteRules"]


def _json_value(sql: str, kind: str) -> str:
    """A SQL value as json_object takes it: SQLite's booleans are the numbers 1 and 0, and
    a number is written as every engine writes it (8.0 is 8: docs/expressions.md)."""
    if kind == "boolean":
        return (
            f"(CASE WHEN ({sql}) IS NULL THEN NULL WHEN ({sql}) THEN json('true') "
            "ELSE json('false') END)"
        )
    if kind == "number":
        return f"json(sluice_json_number({sql}))"
    return sql


class SQLiteRules(SqlRules):
    """The rules engine's dialect parts of ``SQLiteBackend`` (mixed into it)."""

    @abstractmethod
    def _insert(
        self,
        conn: sqlite3.Connection,
        session: int,
        tx: int,
        envelopes: Sequence[Envelope],
        state: MessageState,
    ) -> None: ...

    @abstractmethod
    def _translate(self, exc: sqlite3.Error) -> StorageError: ...

    _rules_schema = ""

    def _rules_enqueue(
        self, conn: sqlite3.Connection, session: int, tx: int, envelopes: Sequence[Envelope]
    ) -> None:
        self._insert(conn, session, tx, envelopes, state=MessageState.READY)

    def _rules_translate(self, exc: Exception) -> Exception | None:
        return self._translate(exc) if isinstance(exc, sqlite3.Error) else None

    def _rules_ids(self, values: Sequence[int]) -> str:
        return ids(values)

    def _rules_exclusive(self, conn: sqlite3.Connection, key: int) -> None:
        pass  # BEGIN IMMEDIATE: one writer at a time already

    def _rules_enqueue_lock(self, conn: sqlite3.Connection, queue_ids: Sequence[int]) -> None:
        pass  # one writer at a time: commits are in order already

    def rules_object(self, pairs: Sequence[tuple[str, str, str]], *, strip: bool) -> str:
        items = ", ".join(f"'{key}', {_json_value(sql, kind)}" for key, sql, kind in pairs)
        built = f"json_object({items})"
        return f"json_patch('{{}}', {built})" if strip else built

    def rules_json_text(self, sql: str) -> str:
        return f"json({sql})"

    def rules_inherited(self, name: str) -> str:
        return f"(m.properties -> '$.\"{name}\"')"

    def rules_body(self, kind: str, sql: str) -> str | None:
        if kind == "same":
            return ", m.body AS body, m.content_type AS content_type"
        if kind == "json":
            return f", {sql} AS body, NULL AS content_type"
        if kind == "scalar":
            return f", ({sql} -> '$[0]') AS body, NULL AS content_type"
        if kind == "text":
            return f", {sql} AS body, '{TEXT}' AS content_type"
        return None

    def _rules_made_from(self, ids: str, number: int) -> str:
        return f"FROM messages AS m WHERE m.id IN (SELECT value FROM json_each({ids}))"

    _rules_made_body = "n.body, n.content_type"
    _rules_made_size = "coalesce(length(CAST(n.body AS BLOB)), 0)"

    def _rules_committed(self, queues: set[str]) -> None:
        pass  # other processes hear of every commit through the WAL (sqlite_notify)
