"""The PostgreSQL dialect's parts of the rules engine's unit of work (backends/rules.py):
its schema and locks, enqueues inside the unit, and the SQL that builds bodies and made
messages."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import psycopg

from sluice.backends.postgres_notify import Notifier
from sluice.backends.postgres_schema import LOCK_CLASS, RULES_LOCK_CLASS
from sluice.backends.postgres_statements import Expected, commit_statements, translate
from sluice.backends.records import CommitPlan, Envelope
from sluice.backends.rules import SqlRules
from sluice.errors import QueueNotFound
from sluice.expr.postgres import json_body
from sluice.message import TEXT

__all__ = ["PostgresRules"]


class PostgresRules(SqlRules):
    """The rules engine's dialect parts of ``PostgresBackend`` (mixed into it)."""

    _schema_sql: str
    _notifier: Notifier

    @abstractmethod
    def queue_not_found(self, envelopes: Sequence[Envelope]) -> QueueNotFound: ...

    @property
    def _rules_schema(self) -> str:
        return f"{self._schema_sql}."

    _rules_insert_marks_done = True

    def _rules_enqueue(
        self, conn: psycopg.Connection[Any], session: int, tx: int, envelopes: Sequence[Envelope]
    ) -> None:
        plan = CommitPlan(session=session, tx=tx, enqueues=envelopes)
        try:
            for name, params in commit_statements(plan, in_caller_tx=True):
                conn.execute(self._q[name], params)
        except psycopg.Error as exc:
            error = translate(exc)
            if isinstance(error, Expected) and error.what == "queue not found":
                raise self.queue_not_found(envelopes) from None
            raise

    def _rules_ids(self, values: Sequence[int]) -> str:
        # An array literal: psycopg adapts a list of ints element by element, several
        # times slower, and a batch sends its ids in four or five parameters.
        return "{" + ",".join(str(int(v)) for v in values) + "}"

    def _rules_translate(self, exc: Exception) -> Exception | None:
        return translate(exc) if isinstance(exc, psycopg.Error) else None

    def _rules_exclusive(self, conn: psycopg.Connection[Any], key: int) -> None:
        conn.execute(self._q["rules_lock"], {"lock_class": RULES_LOCK_CLASS, "key": key})

    def _rules_enqueue_lock(self, conn: psycopg.Connection[Any], queue_ids: Sequence[int]) -> None:
        params = {"lock_class": LOCK_CLASS, "queue_ids": list(queue_ids)}
        conn.execute(self._q["rules_commit_lock"], params)

    def rules_object(self, pairs: Sequence[tuple[str, str, str]], *, strip: bool) -> str:
        # json, not jsonb: written as text at once, where jsonb would build a tree first.
        items = ", ".join(f"'{key}', {sql}" for key, sql, _ in pairs)
        built = f"json_build_object({items})"
        return f"json_strip_nulls({built})::text" if strip else f"{built}::text"

    def rules_json_text(self, sql: str) -> str:
        return f"CAST({sql} AS json)"

    def rules_inherited(self, name: str) -> str:
        return f"(m.properties::jsonb -> '{name}')"

    def rules_body(self, kind: str, sql: str) -> str | None:
        if kind == "same":
            return ", m.body AS body, m.body_bytes AS body_bytes, m.content_type AS content_type"
        if kind == "json":
            return f", ({sql})::text AS body, NULL::bytea AS body_bytes, NULL AS content_type"
        if kind == "scalar":
            return (
                f", (({sql})::jsonb -> 0)::text AS body, NULL::bytea AS body_bytes, "
                "NULL AS content_type"
            )
        if kind == "text":
            return f", ({sql})::text AS body, NULL::bytea AS body_bytes, '{TEXT}' AS content_type"
        return None

    def _rules_made_from(self, ids: str, number: int) -> str:
        # The trigger's bit in its pick (rules_insert's t), not m.id = ANY(ids): a
        # generic plan tests = ANY against a parameter element by element, and a batch
        # of 25,000 spent 1.4 s per action on it.
        return f"FROM t AS m WHERE (m.pick >> {int(number)}) & 1 = 1"

    _rules_parsing = frozenset({"rules_take_evaluate"})

    def _rules_parsed(self, columns: str) -> str:
        # rules_insert's t and rules_take_evaluate's m have every trigger's JSON body
        # parsed once, as j.
        return columns.replace(json_body("m"), "m.j")

    _rules_made_body = "n.body, n.body_bytes, n.content_type"
    _rules_made_size = "coalesce(octet_length(n.body), octet_length(n.body_bytes), 0)"

    def _rules_committed(self, queues: set[str]) -> None:
        self._notifier.signal(queues)
