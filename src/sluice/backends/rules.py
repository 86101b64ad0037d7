"""The rules engine's storage in the SQL backends (sluice.rules; SQL in rules.sql).

The rules engine processes a batch of a queue's messages in one database
transaction: it takes them, evaluates every rule against them with one SELECT of
compiled expressions, enqueues what the rules produce, joins and resets slices and
marks the batch processed; a failure anywhere leaves nothing done. ``RuleUnit`` is
that transaction as the engine sees it: named statements, templates filled with
compiled expressions, and enqueues exactly as a queue transaction's commit makes them.
``MessageRelations`` tells the expression compiler where ``queue('q')`` and
``slice()`` are stored.
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal, TypeVar

from sluice.backends.base_rules import RuleUnit
from sluice.backends.records import Envelope, Row
from sluice.expr.sql import RelationSource, Source, SqlCompiler
from sluice.sql import Template

__all__ = ["KEPT_STATES", "MessageRelations", "SqlRules"]

T = TypeVar("T")

KEPT_STATES = "(1, 2, 5, 6)"
"""The states of a message a relation sees: ready, claimed, waiting and done (kept)."""


class MessageRelations(RelationSource):
    """``queue('q')`` and ``slice()`` over the messages and slice_members tables."""

    def __init__(self, schema: str, queue_ids: Mapping[str, int], slicing: str | None) -> None:
        self._schema = schema
        self._queue_ids = queue_ids
        self._slicing = slicing

    def relation(
        self,
        kind: Literal["queue", "slice"],
        queue: str | None,
        alias: str,
        key: str | None,
        bind: Callable[[Any], str],
    ) -> tuple[str, str]:
        messages = f"{self._schema}messages AS {alias}"
        kept = f"{alias}.state IN {KEPT_STATES}"
        if kind == "queue":
            assert queue is not None  # the checker names a declared queue
            return messages, f"{alias}.queue_id = {bind(self._queue_ids.get(queue, -1))} AND {kept}"
        # slice() is only in rules for a slicing, and comes with its key.
        assert self._slicing is not None
        assert key is not None
        member = f"{alias}_member"
        joined = (
            f"{self._schema}slice_members AS {member} "
            f"JOIN {messages} ON {alias}.id = {member}.message_id"
        )
        return (
            joined,
            f"{member}.slicing = {bind(self._slicing)} AND {member}.key = {key} AND {kept}",
        )

    def queue_name(self, alias: str) -> str:
        return f"(SELECT q.name FROM {self._schema}queues AS q WHERE q.id = {alias}.queue_id)"


class SqlRules:
    """The rules engine's storage for a SQL backend (a mixin; the SQL in rules.sql)."""

    _q: dict[str, str]
    _templates: dict[str, Template]
    _rules_savepoints = itertools.count()
    _rules_insert_marks_done = False
    """Whether rules_insert settles the batch itself (its ``{done}`` hole, a
    data-modifying CTE), or the settling statement runs after it."""

    @abstractmethod
    def _transaction(self, *, durable: bool = True) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def _read_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]: ...

    @abstractmethod
    def _write_rows(self, name: str, params: Mapping[str, Any], *, durable: bool = True) -> int: ...

    @abstractmethod
    def _compiler(self, source: Source, prefix: str) -> SqlCompiler: ...

    @abstractmethod
    def _rules_enqueue(
        self, conn: Any, session: int, tx: int, envelopes: Sequence[Envelope]
    ) -> None:
        """Insert ready messages on ``conn`` as a commit would (the dialect's way)."""

    @abstractmethod
    def _rules_ids(self, values: Sequence[int]) -> Any: ...

    @abstractmethod
    def _rules_translate(self, exc: Exception) -> Exception | None:
        """The StorageError for a driver's error (None: not the driver's), so that a
        savepoint of the unit can catch what the database refused."""

    @abstractmethod
    def _rules_exclusive(self, conn: Any, key: int) -> None: ...

    @abstractmethod
    def _rules_enqueue_lock(self, conn: Any, queue_ids: Sequence[int]) -> None:
        """Take the commit locks an enqueue into these queues takes (where there are any)."""

    # --- SQL that builds a message's parts, in the dialect (rules_insert's holes) -----
    @abstractmethod
    def rules_object(self, pairs: Sequence[tuple[str, str, str]], *, strip: bool) -> str:
        """SQL of a JSON object (text) from (key, value SQL, value type); ``strip``: keys
        whose value is NULL are left out (else they are JSON null)."""

    @abstractmethod
    def rules_json_text(self, sql: str) -> str:
        """SQL of the JSON value whose text ``sql`` gives (a bound parameter), as
        ``rules_object`` takes a value of type ``json``."""

    @abstractmethod
    def rules_inherited(self, name: str) -> str:
        """SQL of the triggering message m's property ``name`` as a JSON value (or NULL)."""

    @abstractmethod
    def rules_body(self, kind: str, sql: str) -> str | None:
        """The derived table's body columns (", ... AS body, ... AS content_type ...") for a
        body of ``kind`` computed by ``sql`` over m; None where only Python builds it."""

    @abstractmethod
    def _rules_made_from(self, ids: str, number: int) -> str:
        """FROM and WHERE of the triggering messages m whose ids are bound as ``ids``:
        those that chose action ``number`` (rules_insert's ``picks`` tells them too)."""

    _rules_made_body: str
    """The body columns of n that rules_insert's rows carry (the dialect's)."""

    _rules_parsing: frozenset[str] = frozenset()
    """Templates whose m has each JSON body parsed once (the dialect's): their columns
    go through _rules_parsed."""

    def _rules_parsed(self, columns: str) -> str:
        """``columns`` over the triggers as rules_insert (and _rules_parsing) give them
        (the dialect's: it may have parsed their bodies once)."""
        return columns

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
        """rules_insert's part and rows for action ``number``: the new messages'
        ``columns`` (body, content type, properties) over their triggers m (bound as
        ``ids``), materialized; their queue bound as ``queue_id``. Rows the target would
        refuse (a NULL body, or a JSON null for a body of ``kind`` scalar; a body over
        ``max_size`` bytes) are left out: the batch finds fewer rows than it chose and
        goes by Python, which makes their errors."""
        placeholder = self._compiler(Source(), "x").placeholder
        part = (
            f"n{number} AS MATERIALIZED (SELECT m.id AS id{self._rules_parsed(columns)} "
            f"{self._rules_made_from(placeholder(ids), number)})"
        )
        null = {"same": "TRUE", "scalar": "n.body IS NOT NULL AND n.body <> 'null'"}.get(
            kind, "n.body IS NOT NULL"
        )
        rows = (
            f"SELECT CAST({placeholder(queue_id)} AS INTEGER) AS queue_id, "
            f"n.id * 64 + {number} AS p_num, {self._rules_made_body}, n.properties "
            f"FROM n{number} AS n "
            f"WHERE {null} AND {self._rules_made_size} <= {placeholder(max_size)}"
        )
        return part, rows

    _rules_made_size: str
    """SQL of a made message's size in bytes (over n): what an enqueue checks."""

    @abstractmethod
    def _rules_committed(self, queues: set[str]) -> None:
        """After a unit that enqueued into ``queues`` committed: tell other processes."""

    @property
    @abstractmethod
    def _rules_schema(self) -> str:
        """The prefix of table names in compiled SQL ('' or the quoted schema and a dot)."""

    # --- the capability ----------------------------------------------------------------
    def rules_unit(self, work: Callable[[RuleUnit], T], *, durable: bool = True) -> T:
        """Run ``work`` in one database transaction: all of it happens, or none."""
        gained: set[str] = set()
        with self._transaction(durable=durable) as conn:
            result = work(_Unit(self, conn, gained))
        if gained:
            self._rules_committed(gained)
        return result

    def rules_read(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        """Run one read-only named statement of rules.sql on its own."""
        return self._read_rows(name, params)

    def rules_write(self, name: str, params: Mapping[str, Any]) -> int:
        """Run one named statement of rules.sql as its own transaction."""
        return self._write_rows(name, params)

    def rules_compiler(
        self, relations: RelationSource | None, prefix: str = "r", alias: str = "m"
    ) -> SqlCompiler:
        """A compiler of rule expressions over the message ``alias`` (the triggering one)."""
        return self._compiler(Source(alias=alias, relations=relations), prefix)

    def rules_relations(self, queue_ids: Mapping[str, int], slicing: str | None) -> RelationSource:
        """Where a rule's relations are: ``slicing`` the one its slice() reads."""
        return MessageRelations(self._rules_schema, queue_ids, slicing)


class _Unit:
    def __init__(self, backend: SqlRules, conn: Any, gained: set[str]) -> None:
        self._backend = backend
        self._conn = conn
        self._gained = gained

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """Driver errors as the backend's StorageError (others as they are)."""
        try:
            yield
        except Exception as exc:
            error = self._backend._rules_translate(exc)
            if error is None:
                raise
            raise error from exc

    def _execute(self, text: str, params: Mapping[str, Any]) -> Any:
        with self._translated():
            return self._conn.execute(text, params)

    def statement_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        cur = self._execute(self._backend._q[name], params)
        return list(cur.fetchall()) if cur.description else []

    def statement_count(self, name: str, params: Mapping[str, Any]) -> int:
        return int(self._execute(self._backend._q[name], params).rowcount)

    def template_rows(
        self, name: str, holes: Mapping[str, str], params: Mapping[str, Any]
    ) -> list[Row]:
        backend = self._backend
        if name in backend._rules_parsing and "columns" in holes:
            holes = {**holes, "columns": backend._rules_parsed(holes["columns"])}
        cur = self._execute(backend._templates[name].fill(**holes), params)
        return list(cur.fetchall()) if cur.description else []

    def ids(self, values: Sequence[int]) -> Any:
        return self._backend._rules_ids(values)

    def exclusive(self, key: int) -> None:
        self._backend._rules_exclusive(self._conn, key)

    def insert_selected(
        self,
        queues: Mapping[str, int],
        holes: Mapping[str, str],
        params: Mapping[str, Any],
        *,
        done: str,
    ) -> int:
        backend = self._backend
        backend._rules_enqueue_lock(self._conn, sorted(queues.values()))
        settle = backend._q[done]
        if backend._rules_insert_marks_done:
            # The statement as a data-modifying CTE of the INSERT (its text, less the ';').
            holes = {**holes, "done": settle.rstrip().removesuffix(";")}
        text = backend._templates["rules_insert"].fill(**holes)
        count = int(self._execute(text, params).rowcount)
        if not backend._rules_insert_marks_done:
            self._execute(settle, {"ids": params["ids"], "now": params["now"]})
        if count:
            self._gained.update(queues)
        return count

    def enqueue(self, session: int, tx: int, envelopes: Sequence[Envelope]) -> None:
        if envelopes:
            with self._translated():
                self._backend._rules_enqueue(self._conn, session, tx, envelopes)
            self._gained.update(e.queue for e in envelopes)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        name = f"rule_{next(self._backend._rules_savepoints)}"
        self._conn.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            self._conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
            self._conn.execute(f"RELEASE SAVEPOINT {name}")
            raise
        self._conn.execute(f"RELEASE SAVEPOINT {name}")
