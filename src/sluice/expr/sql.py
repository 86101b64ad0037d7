"""What the SQL compilers share: the walk over a checked tree, parameters, and the
parts of SQL every engine spells the same way.

Each dialect says how to reach the message's fields and how to read JSON,
which is where engines differ and transpilers go wrong (SQLite's ``->``
returns JSON text, ``->>`` a value). Constants are always bound parameters.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from sluice.errors import ExpressionError
from sluice.expr.failing import END, SHOWN, cast_suffix, opening
from sluice.expr.nodes import (
    RULES_ONLY,
    ArrayAgg,
    Binary,
    Case,
    Cast,
    Coerce,
    Column,
    Compare,
    Func,
    In,
    IsNull,
    Like,
    Lit,
    Logic,
    Node,
    Not,
    Path,
    Prop,
    Type,
    Var,
    XPath,
)

__all__ = ["Compiled", "RelationSource", "Source", "SqlCompiler"]


class RelationSource(Protocol):
    """Where a rule's relations are stored: given by the storage that runs the rules."""

    def relation(
        self,
        kind: Literal["queue", "slice"],
        queue: str | None,
        alias: str,
        key: str | None,
        bind: Callable[[Any], str],
    ) -> tuple[str, str]:
        """(FROM items, WHERE condition) reading the relation's messages as rows named
        ``alias`` (a messages row, like ``m``). ``queue``: the queue of queue('q');
        ``key``: for slice(), the SQL of the slice's key as text (see
        ``sluice.expr.check.slice_key``); ``bind`` binds a constant as a parameter.

        The compiler splices them as ``SELECT ... FROM {from} WHERE ({where}) AND
        (...)``, in a subquery of the expression (correlated with ``m``). ``alias``
        is unique in the compiled SQL; more names the FROM items need are best made
        from it (``{alias}_s``). Every column of ``sluice.expr.check.COLUMNS``,
        ``body``, ``properties`` and ``id`` must be readable as ``{alias}.<column>``.
        """

    def queue_name(self, alias: str) -> str:
        """SQL for the name of the queue the message ``alias`` is in (``a.queue``)."""


@dataclass(frozen=True, slots=True)
class Source:
    """Where a message's parts are in the SQL the expression is spliced into."""

    alias: str = "m"
    properties: Mapping[str, str] = field(default_factory=dict)
    """Declared property name -> the stored column holding it."""
    relations: RelationSource | None = None
    """Where queue('q') and slice() read from; None: expressions use no relations."""


@dataclass(frozen=True, slots=True)
class Compiled:
    """SQL text and the parameters it names."""

    sql: str
    params: dict[str, Any]


_INFIX: Final = {"and": " AND ", "or": " OR "}

MAX_SQL_LENGTH: Final = 1_000_000
"""The most SQL one expression may compile to."""


class SqlCompiler(ABC):
    """One compilation: ``compile`` may be called for several expressions sharing parameters."""

    def __init__(self, source: Source | None = None, *, prefix: str = "x") -> None:
        self.source = source or Source()
        self.params: dict[str, Any] = {}
        self._prefix = prefix
        self._vars: dict[str, str] = {}
        self._rows: dict[str, str] = {}
        """``Relation.row`` -> the SQL alias of its rows, while compiling its subquery."""
        self._aliases = 0

    # --- what each dialect provides --------------------------------------------------
    @abstractmethod
    def placeholder(self, name: str) -> str: ...

    @abstractmethod
    def column(self, name: str, alias: str) -> str:
        """A message field of ``sluice.expr.check.COLUMNS`` of the row ``alias`` as SQL."""

    @abstractmethod
    def json_typed(self, path: Path, kind: Type) -> str:
        """The JSON value at ``path`` if it has JSON type ``kind``, else NULL."""

    @abstractmethod
    def json_is_null(self, path: Path) -> str: ...

    @abstractmethod
    def aggregate(self, node: ArrayAgg, alias: str) -> str: ...

    @abstractmethod
    def cast(self, sql: str, source: Type, target: Type) -> str: ...

    @abstractmethod
    def function(self, name: str, args: list[str]) -> str: ...

    @abstractmethod
    def xpath(self, path: str, kind: Type, alias: str) -> str:
        """XPath over the body of the row ``alias``."""

    def rules_node(self, node: Node) -> str:
        """A node only rules have (``sluice.expr.nodes.RULES_ONLY``): see sql_rules."""
        raise ExpressionError(
            f"{type(node).__name__.lower()}: relations, now() of the engine clock and body "
            f"constructors are for rules, which run on SQLite and PostgreSQL; "
            f"{type(self).__name__} cannot compile them"
        )

    def json_text(self, path: Path) -> str:
        """A JSON value as it is (a rule's body ``body.order``): see sql_rules. Elsewhere a
        JSON path is always read as a type (Coerce) or tested with IS NULL."""
        raise AssertionError("a JSON path is always read through Coerce or IS NULL")

    def row_field(self, name: str, alias: str) -> str:
        """``a.id`` or ``a.queue`` of a relation's row: see sql_rules."""
        return self.rules_node(Column(name, "any", alias))

    def text_order(self, sql: str) -> str:
        """Text as compared and sorted: by code point on every engine."""
        return sql

    def literal(self, value: Any, kind: Type) -> str:
        return "NULL" if value is None else self.bind(value)

    def divide(self, left: str, right: str) -> str:
        return f"({left} / NULLIF({right}, 0))"

    def like(self, sql: str, pattern: str) -> str:
        return f"({sql} LIKE {self.bind(pattern)})"

    # --- run-time errors (in rules: see sluice.expr.failing) ---------------------------
    @abstractmethod
    def fail(self, reason: str, kind: Type, like: str) -> str:
        """SQL of type ``kind`` that raises an error whose message holds the text SQL
        ``reason`` wherever it is evaluated; ``like``, a value of the row, keeps it from
        being computed ahead as a constant."""

    def let(self, values: list[str], kind: Type, body: Callable[[list[str]], str]) -> str:
        """``body`` (of type ``kind``) over ``values``, each computed once: a subquery of
        one row, so that a checked operand is not spelt (and computed) twice."""
        alias = self.new_alias("l")
        inner = ", ".join(f"{v} AS v{n}" for n, v in enumerate(values))
        names = [f"{alias}.v{n}" for n in range(len(values))]
        return f"(SELECT {body(names)} FROM (SELECT {inner}) AS {alias})"

    def failing_divide(self, left: str, right: str, reason: str) -> str:
        """``left / right``, a run-time error where ``right`` is 0 (NULL / 0 is NULL)."""

        def checked(v: list[str]) -> str:
            text = opening(self._prefix) + reason + END
            error = self.fail(self.literal(text, "text"), "number", v[1])
            quotient = self.divide(v[0], v[1])
            return f"(CASE WHEN {v[1]} = 0 AND {v[0]} IS NOT NULL THEN {error} ELSE {quotient} END)"

        return self.let([left, right], "number", checked)

    def failing_cast(self, sql: str, node: Cast, reason: str) -> str:
        """CAST of text, a run-time error where the text does not convert, showing it."""

        def checked(v: list[str]) -> str:
            converted = self.cast(v[0], node.source, node.type)
            shown = (
                f"({self.literal(opening(self._prefix) + reason, 'text')} || "
                f"substr({v[0]}, 1, {SHOWN}) || "
                f"{self.literal(cast_suffix(node.type) + END, 'text')})"
            )
            error = self.fail(shown, node.type, v[0])
            return (
                f"(CASE WHEN {v[0]} IS NOT NULL AND {converted} IS NULL THEN {error} "
                f"ELSE {converted} END)"
            )

        return self.let([sql], node.type, checked)

    # --- the walk --------------------------------------------------------------------
    def bind(self, value: Any) -> str:
        name = f"{self._prefix}{len(self.params)}"
        self.params[name] = value
        return self.placeholder(name)

    def var(self, var: Var) -> str:
        return self._vars[var.name]

    def alias(self, row: str | None) -> str:
        """The SQL name of a message's row: a relation's (``Relation.row``), or ``m``'s."""
        return self.source.alias if row is None else self._rows[row]

    def new_alias(self, stem: str) -> str:
        """A table alias no other part of this compilation uses."""
        self._aliases += 1
        return f"_{stem}{self._aliases}"

    def compile(self, node: Node) -> str:
        """``node`` as SQL of this dialect, its constants bound in ``params``.

        A dialect may spell an operand more than once (x >= 1 AND ... x ...): nested
        such forms grow exponentially, so the SQL is checked for size as it grows.
        """
        sql = self._node(node)
        if len(sql) > MAX_SQL_LENGTH:
            raise ExpressionError(
                f"the expression is too large once compiled (over {MAX_SQL_LENGTH} characters "
                "of SQL); simplify it"
            )
        return sql

    def _node(self, node: Node) -> str:  # noqa: PLR0911, PLR0912  (one case per kind)
        if isinstance(node, Lit):
            return self.literal(node.value, node.type)
        if isinstance(node, Column):
            if node.name in ("id", "queue"):
                return self.row_field(node.name, self.alias(node.row))
            return self.column(node.name, self.alias(node.row))
        if isinstance(node, Prop):
            stored = f"{self.source.alias}.{self.source.properties[node.name]}"
            # Boolean properties are stored as numbers, 1 or 0.
            return f"({stored} <> 0)" if node.type == "boolean" else stored
        if isinstance(node, Coerce):
            assert isinstance(node.arg, Path)  # the checker coerces only JSON paths
            return self.json_typed(node.arg, node.type)
        if isinstance(node, Path):
            return self.json_text(node)
        if isinstance(node, Cast):
            if node.fails is not None:
                return self.failing_cast(self.compile(node.arg), node, node.fails)
            return self.cast(self.compile(node.arg), node.source, node.type)
        if isinstance(node, Binary):
            left, right = self.compile(node.left), self.compile(node.right)
            if node.op == "/" and node.fails is not None:
                return self.failing_divide(left, right, node.fails)
            if node.op == "/":
                return self.divide(left, right)
            return f"({left} {node.op} {right})"
        if isinstance(node, Compare):
            left, right = self.compile(node.left), self.compile(node.right)
            if node.operand == "text" and node.op not in ("=", "<>"):
                # Both sides: one collation given on each side cannot clash with the other.
                left, right = self.text_order(left), self.text_order(right)
            return f"({left} {node.op} {right})"
        if isinstance(node, Logic):
            return "(" + _INFIX[node.op].join(self.compile(a) for a in node.args) + ")"
        if isinstance(node, Not):
            return f"(NOT {self.compile(node.arg)})"
        if isinstance(node, IsNull):
            if isinstance(node.arg, Path):
                test = self.json_is_null(node.arg)
                return f"(NOT {test})" if node.negated else test
            return f"({self.compile(node.arg)} IS {'NOT ' if node.negated else ''}NULL)"
        if isinstance(node, In):
            items = ", ".join(self.compile(i) for i in node.items)
            return f"({self.compile(node.arg)} {'NOT ' if node.negated else ''}IN ({items}))"
        if isinstance(node, Like):
            test = self.like(self.compile(node.arg), node.pattern)
            return f"(NOT {test})" if node.negated else test
        if isinstance(node, Case):
            whens = " ".join(
                f"WHEN {self.compile(c)} THEN {self.compile(v)}" for c, v in node.whens
            )
            default = f" ELSE {self.compile(node.default)}" if node.default else ""
            return f"(CASE {whens}{default} END)"
        if isinstance(node, Func):
            if node.name == "coalesce":
                return "COALESCE(" + ", ".join(self.compile(a) for a in node.args) + ")"
            return self.function(node.name, [self.compile(a) for a in node.args])
        if isinstance(node, ArrayAgg):
            alias = f"_e{len(self._vars)}"
            self._vars[node.var.name] = alias
            try:
                return self.aggregate(node, alias)
            finally:
                del self._vars[node.var.name]
        if isinstance(node, XPath):
            return self.xpath(node.path, node.type, self.alias(node.row))
        if isinstance(node, RULES_ONLY):
            return self.rules_node(node)
        raise AssertionError(f"unknown node {node!r}")

    def order_key(self, node: Node, descending: bool) -> list[str]:
        """ORDER BY terms for one key; values that are NULL go last either way."""
        direction = " DESC" if descending else ""
        if node.type == "any" and isinstance(node, Path):
            # A JSON value of unknown type: numbers (by value) before text. (NULL, the
            # other value of no type, is an ordinary key: an AssertionError was here.)
            keys = [self.json_typed(node, "number"), self.text_order(self.json_typed(node, "text"))]
        elif node.type == "text":
            keys = [self.text_order(self.compile(node))]
        else:
            keys = [self.compile(node)]
        return [f"{k}{direction} NULLS LAST" for k in keys]
