"""The rules engine's part of the storage seam: ``RuleStore`` (its statements, compilers
and relations) and ``RuleUnit`` (one database transaction of it), mixed into ``Backend``
and re-exported by ``backends.base``; sluice.rules uses them, backends/rules.py and
rules.sql implement them for both dialects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from sluice.backends.records import Envelope, Row
from sluice.expr.sql import RelationSource, SqlCompiler

T = TypeVar("T")

__all__ = ["RuleStore", "RuleUnit"]


class RuleUnit(Protocol):
    """One database transaction of the rules engine."""

    def statement_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        """Run the named statement (rules.sql); its rows."""

    def statement_count(self, name: str, params: Mapping[str, Any]) -> int:
        """Run the named statement; how many rows it changed."""

    def template_rows(
        self, name: str, holes: Mapping[str, str], params: Mapping[str, Any]
    ) -> list[Row]:
        """Run the named template with its holes filled by compiled expressions."""

    def ids(self, values: Sequence[int]) -> Any:
        """A list of ids as this dialect binds it (the ``{rules_ids}`` fragment's ``ids``)."""

    def enqueue(self, session: int, tx: int, envelopes: Sequence[Envelope]) -> None:
        """Insert ready messages exactly as a queue transaction's commit would."""

    def exclusive(self, key: int) -> None:
        """From here to the unit's end, no other engine's unit holds ``key`` (a queue id,
        or a slicing's negative key): a lock where engines run concurrently (PostgreSQL);
        SQLite's writers are serial anyway."""

    def insert_selected(
        self,
        queues: Mapping[str, int],
        holes: Mapping[str, str],
        params: Mapping[str, Any],
        *,
        done: str,
    ) -> int:
        """Insert ready messages built by SQL (rules.sql's rules_insert, holes filled) into
        ``queues`` (names and ids), with the commit locks an enqueue takes, and settle the
        batch's triggers (``params['ids']``) as the statement ``done`` does (rules_done or
        rules_remove); how many messages it inserted."""

    def savepoint(self) -> AbstractContextManager[None]:
        """A part of the unit that a failure inside undoes alone (the error propagates)."""


class RuleStore(Protocol):
    """The rules engine's storage (sluice.rules; backends/rules.py, rules.sql)."""

    def rules_unit(self, work: Callable[[RuleUnit], T], *, durable: bool = True) -> T:
        """Run ``work`` in one database transaction: all of it happens, or none."""

    def rules_read(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        """Run one read-only named statement of rules.sql on its own."""

    def rules_write(self, name: str, params: Mapping[str, Any]) -> int:
        """Run one named statement of rules.sql as its own transaction."""

    def rules_compiler(
        self, relations: RelationSource | None, prefix: str = ..., alias: str = ...
    ) -> SqlCompiler:
        """A compiler of rule expressions over the message ``alias`` (the triggering one)."""

    def rules_object(self, pairs: Sequence[tuple[str, str, str]], *, strip: bool) -> str:
        """SQL of a JSON object from (key, value SQL, value type) (see backends/rules.py)."""

    def rules_json_text(self, sql: str) -> str:
        """SQL of the JSON value whose text ``sql`` gives (a bound parameter)."""

    def rules_inherited(self, name: str) -> str:
        """SQL of the triggering message's property ``name`` as a JSON value."""

    def rules_body(self, kind: str, sql: str) -> str | None:
        """The body columns of rules_insert for a body of ``kind``; None: Python builds it."""

    def rules_made(
        self,
        number: int,
        columns: str,
        *,
        ids: str,
        queue_id: str,
        max_size: str,
        kind: str,
    ) -> tuple[str, str]:
        """rules_insert's part and rows for one action (see backends/rules.py)."""

    def rules_relations(self, queue_ids: Mapping[str, int], slicing: str | None) -> RelationSource:
        """Where a rule's relations are: ``slicing`` the one its slice() reads."""
