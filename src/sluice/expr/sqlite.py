"""The expression language compiled for SQLite: JSON1 for bodies, a few registered
functions where SQLite's own disagree with the other engines (Unicode case,
number parsing, dates, XPath)."""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, Final, Literal

from sluice.errors import ExpressionError
from sluice.expr import python
from sluice.expr.nodes import ArrayAgg, Node, Path, Type
from sluice.expr.sql_rules import RulesSqlCompiler
from sluice.expr.xml import evaluate_xpath, select_nodes
from sluice.message import encode_json, is_xml

__all__ = ["SQLiteCompiler", "register_functions"]

_JSON_TYPES: Final[dict[str, str]] = {
    "number": "('integer', 'real')",
    "text": "('text')",
    "boolean": "('true', 'false')",
}

# A body is JSON when sluice.message.is_json says so of its content type (stored
# NULL for application/json itself): what comes before any ';', stripped, in any case.
_BASE_TYPE: Final = (
    "lower(trim(substr({a}.content_type, 1, instr({a}.content_type || ';', ';') - 1), "
    "' ' || char(9, 10, 11, 12, 13)))"
)
_IS_JSON: Final = (
    f"({{a}}.content_type IS NULL OR {_BASE_TYPE} = 'application/json' "
    f"OR {_BASE_TYPE} LIKE '%+json')"
)


def _json_path(steps: tuple[str | int, ...]) -> str:
    return "$" + "".join(f"[{step}]" if isinstance(step, int) else _label(step) for step in steps)


def _label(key: str) -> str:
    """An object key as a step of a JSON path.

    SQLite (before 3.45) compares a path's key with the key as written in the
    stored JSON text, escapes and all, and a quoted key ends at the first double
    quote. sluice stores JSON as ``encode_json`` writes it, so the key is written
    that way too: quoted, or bare when its written form holds a double quote
    (the checker refuses keys that would need both).
    """
    written = encode_json(key)[1:-1]
    return f'."{written}"' if '"' not in written else f".{written}"


class SQLiteCompiler(RulesSqlCompiler):
    _nesting = 0

    def compile(self, node: Node) -> str:
        """``node`` as SQL; ExpressionError if it nests deeper than SQLite parses."""
        self._nesting += 1
        try:
            sql = super().compile(node)
        finally:
            self._nesting -= 1
        if self._nesting == 0 and not _parses(sql, self.params):
            raise ExpressionError(
                "the expression nests too deeply for SQLite to run it; split it up "
                "(several conditions joined with AND or OR nest the least)"
            )
        return sql

    def placeholder(self, name: str) -> str:
        return f":{name}"

    def column(self, name: str, alias: str) -> str:
        a = alias
        if name == "content_type":
            return f"coalesce({a}.content_type, 'application/json')"
        return f"{a}.{name}"

    def _document(self, path: Path) -> tuple[str, str | None]:
        """(JSON text, path) of a JSON value; path None: a json_each element itself."""
        a = self.alias(path.row)
        if path.root == "body":
            doc = f"(CASE WHEN {_IS_JSON.format(a=a)} THEN {a}.body END)"
        elif path.root == "props":
            doc = f"{a}.properties"
        else:
            element = self.var(path.root)
            if not path.steps:
                return element, None
            doc = f"(CASE WHEN {element}.type IN ('object', 'array') THEN {element}.value END)"
        return doc, self.bind(_json_path(path.steps))

    def json_typed(self, path: Path, kind: Type) -> str:
        doc, where = self._document(path)
        if where is None:
            return f"(CASE WHEN {doc}.type IN {_JSON_TYPES[kind]} THEN {doc}.value END)"
        return (
            f"(CASE WHEN json_type({doc}, {where}) IN {_JSON_TYPES[kind]} "
            f"THEN json_extract({doc}, {where}) END)"
        )

    def json_is_null(self, path: Path) -> str:
        doc, where = self._document(path)
        if where is None:
            return f"({doc}.type = 'null')"
        return f"(coalesce(json_type({doc}, {where}), 'null') = 'null')"

    def aggregate(self, node: ArrayAgg, alias: str) -> str:
        assert isinstance(node.array, Path)
        doc, where = self._document(node.array)
        if where is None:
            is_array = f"{doc}.type = 'array'"
            elements = f"json_each({doc}.value) AS {alias}"
        else:
            is_array = f"json_type({doc}, {where}) = 'array'"
            elements = f"json_each({doc}, {where}) AS {alias}"
        kept = f" WHERE {self.compile(node.where)} IS 1" if node.where is not None else ""
        if node.value is None:
            result = "count(*) > 0" if node.op == "exists" else "count(*)"
            return f"(CASE WHEN {is_array} THEN (SELECT {result} FROM {elements}{kept}) END)"
        # The values are computed in a subquery of their own: an aggregate over a value
        # that names only the message (sum(a, x -> priority)) would otherwise belong to
        # the enclosing query, as SQL has it, and aggregate the messages instead.
        value = self.compile(node.value)
        total = {"sum": "total", "min": "min", "max": "max", "avg": "avg"}[node.op]
        return (
            f"(CASE WHEN {is_array} THEN (SELECT {total}({alias}_r.x) FROM "
            f"(SELECT {value} AS x FROM {elements}{kept}) AS {alias}_r) END)"
        )

    def cast(self, sql: str, source: Type, target: Type) -> str:
        if target == "text":
            if source == "boolean":
                return f"(CASE {sql} WHEN 1 THEN 'true' WHEN 0 THEN 'false' END)"
            # SQLite prints 15 significant digits (0.1 + 0.2 as 0.3): the shortest
            # form that reads back as the same double is Python's, and PostgreSQL's.
            return f"sluice_number_text({sql})"
        if target == "number":
            return sql if source == "boolean" else f"sluice_to_number({sql})"
        if source == "number":
            return f"({sql} <> 0)"
        return f"(CASE lower(trim({sql}, ' ')) WHEN 'true' THEN 1 WHEN 'false' THEN 0 END)"

    def function(self, name: str, args: list[str]) -> str:
        if name in _REGISTERED:
            return f"sluice_{name}({', '.join(args)})"
        if name == "now":
            return "((julianday('now') - 2440587.5) * 86400.0)"
        if name == "length":
            return f"length({args[0]})"
        if name == "trim":
            return f"trim({args[0]}, ' ')"
        if name == "abs":
            return f"abs({args[0]})"
        raise AssertionError(f"no SQLite form for {name}")

    def divide(self, left: str, right: str) -> str:
        return f"(({left}) * 1.0 / NULLIF({right}, 0))"

    def fail(self, reason: str, kind: Type, like: str) -> str:
        # SQLite has no function that raises a text of one's own, and a Python function's
        # exception reaches the caller as "user-defined function raised exception": a
        # JSON path error quotes the path it was given. (A CASE branch not taken is not
        # evaluated, constant or not.)
        return f"json_extract('{{}}', {reason})"

    def like(self, sql: str, pattern: str) -> str:
        # SQLite's LIKE ignores ASCII case; GLOB is case-sensitive, so LIKE becomes GLOB.
        glob = "".join(
            "*" if c == "%" else "?" if c == "_" else f"[{c}]" if c in "*?[" else c for c in pattern
        )
        return f"({sql} GLOB {self.bind(glob)})"

    def xpath(self, path: str, kind: Type, alias: str) -> str:
        a = alias
        # content_type is NULL for JSON, which makes the call NULL: no nodes.
        return f"sluice_xpath({self.bind(kind)}, {self.bind(path)}, {a}.body, {a}.content_type)"

    # --- rules -----------------------------------------------------------------------
    def json_build(self, kind: Literal["object", "array"], args: list[str]) -> str:
        return f"json_{kind}({', '.join(args)})"

    def json_item(self, sql: str, kind: Type) -> str:
        if kind == "json":  # JSON text, marked as JSON so that it is nested, not quoted
            return f"json({sql})"
        if kind == "number":  # 8.0 written 8, as the other engines write it (see numbers)
            return f"json(sluice_json_number({sql}))"
        if kind == "boolean":  # SQLite's booleans are the numbers 1 and 0
            return f"json(CASE {sql} WHEN 1 THEN 'true' WHEN 0 THEN 'false' END)"
        return sql

    def json_raw(self, path: Path) -> str:
        doc, where = self._document(path)
        assert where is not None  # neither constructors nor a value as it is in lambdas
        # -> gives the value's JSON text (NULL where there is none): strings stay strings.
        return f"json({doc} -> {where})"

    def json_text(self, path: Path) -> str:
        return self.json_raw(path)

    def rows_aggregate(self, op: str, value: str) -> str:
        if op == "count":
            return "count(*)"
        return f"{'total' if op == 'sum' else op}({value})"

    def xml_nodes(self, path: str, alias: str) -> str:
        a = alias
        return f"sluice_xpath_nodes({self.bind(path)}, {a}.body, {a}.content_type)"

    def char(self, code: int) -> str:
        return f"char({code})"


@lru_cache(maxsize=1)
def _probe() -> tuple[sqlite3.Connection, threading.Lock]:
    return sqlite3.connect(":memory:", check_same_thread=False), threading.Lock()


_EMBEDDING = 20
"""Parentheses around an expression as it is probed: the statements that run it (a
claim's, with ``order_by`` the deepest) take about 16 of the parser's levels first."""


def _parses(sql: str, params: Mapping[str, Any]) -> bool:
    """Whether SQLite's parser takes ``sql`` within the statements that run it: its stack
    is about 100 levels deep, and a checked expression can nest deeper than that once
    compiled. Only the parse is tried (the names it uses do not exist on the probing
    connection)."""
    conn, lock = _probe()
    with lock:
        try:
            conn.execute(f"EXPLAIN SELECT {'(' * _EMBEDDING}{sql}{')' * _EMBEDDING}", params)
        except sqlite3.Error as exc:
            text = str(exc)
            return "parser stack overflow" not in text and "too large" not in text
    return True


def _guard(fn: Any) -> Any:
    # A registered function must not raise into SQLite (that aborts the statement).
    def call(*args: Any) -> Any:
        if any(a is None for a in args):
            return None
        try:
            value = fn(*args)
        except (ArithmeticError, TypeError, ValueError):
            return None
        return int(value) if isinstance(value, bool) else value

    return call


def _xpath(kind: str, path: str, body: str | bytes, content_type: str) -> Any:
    # Only an XML body has nodes: a text body that happens to parse has none.
    return evaluate_xpath(kind, path, body) if is_xml(content_type) else None


def _xpath_nodes(path: str, body: str | bytes, content_type: str) -> str | None:
    return select_nodes(path, body) if is_xml(content_type) else None


def _json_number(x: float) -> str | None:
    # JSON has no NaN or infinities: null, as Spark writes them (PostgreSQL has none).
    return python._to_text(x) if math.isfinite(x) else None


def _integral(fn: Callable[[float], int]) -> Callable[[float], float]:
    # From 2**52 on every double is whole (and SQLite's integers stop at 2**63).
    return lambda x: x if abs(x) >= 2**52 else fn(x)


_REGISTERED: Final[Mapping[str, tuple[tuple[int, ...], Callable[..., Any]]]] = {
    # Unicode case mapping (SQLite's lower and upper know ASCII only):
    "lower": ((1,), str.lower),
    "upper": ((1,), str.upper),
    # SQLite's round ignores negative digits and stops at 30 places:
    "round": ((1, 2), python._round),
    # SQLite's substr reads its numbers as 32-bit integers, CAST(... AS INTEGER)
    # stops at 2**63, and replace ignores a NULL replacement for an empty needle:
    "substr": ((2, 3), python._substr),
    "replace": ((3,), python._replace),
    "floor": ((1,), _integral(math.floor)),
    "ceil": ((1,), _integral(math.ceil)),
    "trunc": ((1,), _integral(math.trunc)),
    "epoch": ((1,), python._epoch),
    "year": ((1,), python._date_part("year")),
    "month": ((1,), python._date_part("month")),
    "day": ((1,), python._date_part("day")),
}
"""Functions compiled to a call of ``sluice_<name>``: Python's own, where SQLite's differ."""


def register_functions(conn: sqlite3.Connection) -> None:
    """Register the functions compiled expressions call, on one connection."""
    functions: dict[str, tuple[tuple[int, ...], Callable[..., Any]]] = {
        **{f"sluice_{name}": entry for name, entry in _REGISTERED.items()},
        "sluice_to_number": ((1,), python._to_number),
        "sluice_number_text": ((1,), python._to_text),
        "sluice_json_number": ((1,), _json_number),
        "sluice_xpath": ((4,), _xpath),
        "sluice_xpath_nodes": ((3,), _xpath_nodes),
    }
    for name, (arities, fn) in functions.items():
        for arity in arities:
            conn.create_function(name, arity, _guard(fn), deterministic=True)
