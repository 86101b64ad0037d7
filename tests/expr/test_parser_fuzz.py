"""The checker answers any text with a checked tree or an ExpressionError, never
with another exception: random text, SQL-ish token soups, deep nesting. And a
checked tree compiles, and SQLite computes what the Python evaluator does."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot.errors import ParseError

from sluice.errors import ExpressionError
from sluice.expr import Node, Scope, compile_python, parse, parse_order
from sluice.expr.nodes import (
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
    Not,
    Path,
    Prop,
    XPath,
)
from sluice.expr.postgres import PostgresCompiler
from sluice.expr.sqlite import SQLiteCompiler, register_functions

from .vectors import MESSAGE_DEFAULTS, normalise, python_row, same_value, stored

_SCOPE = Scope(properties={"customer": "text", "total": "number", "vip": "boolean"})

_TOKENS = [
    # names and paths
    "body",
    "props",
    "priority",
    "type",
    "enqueued_at",
    "content_type",
    "customer",
    "vip",
    "x",
    "l",
    "i",
    "foo",
    ".",
    "a",
    "lines",
    "[0]",
    "[",
    "]",
    '"key with space"',
    "m.body",
    # literals
    "1",
    "0",
    "-1",
    "2.5",
    "1e3",
    "1e999",
    "99999999999999999999",
    "'text'",
    "''",
    "'%'",
    "'a_b'",
    "'/a/b'",
    "'it''s'",
    "'",
    '"',
    "NULL",
    "TRUE",
    "FALSE",
    "'日本'",
    "'😀'",
    # operators and punctuation
    "+",
    "-",
    "*",
    "/",
    "%",
    "||",
    "=",
    "<>",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "(",
    ")",
    ",",
    "->",
    "->>",
    "::",
    ";",
    "?",
    ":x",
    "@x",
    "$1",
    "--",
    "/*",
    "*/",
    "#",
    # keywords
    "AND",
    "OR",
    "NOT",
    "IS",
    "IN",
    "LIKE",
    "ILIKE",
    "ESCAPE",
    "BETWEEN",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "CAST",
    "AS",
    "DOUBLE",
    "INT",
    "TEXT",
    "BOOLEAN",
    "VARCHAR(3)",
    "DATE",
    "SELECT",
    "FROM",
    "WHERE",
    "UNION",
    "DROP",
    "TABLE",
    "EXISTS",
    "DISTINCT",
    "OVER",
    "PARTITION",
    "BY",
    "ORDER",
    "ASC",
    "DESC",
    "NULLS",
    "LAST",
    "INTERVAL",
    # functions
    "lower(",
    "upper(",
    "length(",
    "substr(",
    "substring(",
    "trim(",
    "replace(",
    "round(",
    "floor(",
    "ceil(",
    "abs(",
    "coalesce(",
    "epoch(",
    "year(",
    "now(",
    "count(",
    "sum(",
    "min(",
    "max(",
    "avg(",
    "exists(",
    "filter(",
    "xpath(",
    "xpath_number(",
    "xpath_boolean(",
    "json_array_length(",
    "sleep(",
    "pg_sleep(",
    "load_extension(",
    # lambdas
    "x ->",
    "l ->",
    "(x, y) ->",
    "x -> x",
    "l -> l.price",
    "i -> i.id = 'a'",
]


_INTERNAL = ("sqlglot", "<class", "Required keyword", "Expecting", "Expected ",
             "Invalid expression /", "Unexpected token", "Error tokenizing", "Col:",
             "is not part of the expression language)", "Traceback")  # fmt: skip


def readable(error: ExpressionError) -> None:
    """``error`` says in sluice's words what is wrong, and where when it knows."""
    message = str(error)
    for internal in _INTERNAL:
        assert internal not in message, message
    assert error.reason, message
    assert error.reason in message, message
    if error.position is not None:
        assert error.expression is not None
        assert 0 <= error.position <= len(error.expression), message
        assert message.startswith("expression error at ")
        assert f"column {error.column}:" in message.splitlines()[0], message
        assert message.splitlines()[-1].strip(" ^") == "", message  # the caret line
    if isinstance(error.__cause__, ParseError):  # sqlglot's error: kept, and placed
        assert error.position is not None, message


def _answer(text: str, *, scope: Scope | None = None) -> Node | None:
    """``parse``'s answer, None for an ExpressionError; anything else fails the test."""
    try:
        node = parse(text, scope)
    except ExpressionError as error:
        readable(error)
        return None
    assert node.type in ("boolean", "number", "text", "json", "any")
    return node


def _order_answer(text: str) -> tuple[Node, bool] | None:
    try:
        return parse_order(text, _SCOPE)
    except ExpressionError as error:
        readable(error)
        return None


_FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FAST
@given(st.text(max_size=80))
def test_random_text(text: str) -> None:
    _answer(text)
    _order_answer(text)


@_FAST
@given(st.lists(st.sampled_from(_TOKENS), max_size=24), st.sampled_from([" ", ""]))
def test_token_soup(tokens: list[str], sep: str) -> None:
    text = sep.join(tokens)
    _answer(text, scope=_SCOPE)
    _order_answer(text)


_LEAVES = st.sampled_from(
    [
        "body.a",
        "body.lines[0].price",
        "props.region",
        "priority",
        "total",
        "customer",
        "vip",
        "1",
        "2.5",
        "'x'",
        "NULL",
        "TRUE",
        "x",
        "x.price",
        "now()",
    ]
)


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(inner, st.sampled_from(["+", "*", "/", "||", "=", "<", "AND", "OR"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        inner.map(lambda s: f"NOT {s}"),
        inner.map(lambda s: f"{s} IS NULL"),
        inner.map(lambda s: f"CAST({s} AS DOUBLE)"),
        inner.map(lambda s: f"{s} IN (1, 'a', NULL)"),
        inner.map(lambda s: f"{s} LIKE 'a%'"),
        inner.map(lambda s: f"CASE WHEN {s} THEN 1 ELSE 0 END"),
        inner.map(lambda s: f"coalesce({s}, 0)"),
        inner.map(lambda s: f"upper({s})"),
        inner.map(lambda s: f"sum(body.lines, x -> {s})"),
        inner.map(lambda s: f"count(filter(body.lines, x -> {s}))"),
        inner.map(lambda s: f"exists(body.lines, x -> {s})"),
    )


@_FAST
@given(st.recursive(_LEAVES, _extend, max_leaves=12))
def test_generated_expressions(text: str) -> None:
    node = _answer(text, scope=_SCOPE)
    if node is not None:
        _walk(node)  # a checked tree is well-formed: every node of a known kind


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=1, max_value=5000), st.sampled_from(["(", "NOT ", "-", "upper("]))
def test_deep_nesting(depth: int, opener: str) -> None:
    closer = ")" if opener in ("(", "upper(") else ""
    _answer(opener * depth + "1" + closer * depth)


def test_very_long_texts_are_refused_quickly() -> None:
    for text in ["1 + " * 5000 + "1", "(" * 20000, "'" + "a" * 20000 + "'", "x" * 10_001]:
        assert _answer(text) is None


def test_deep_lambdas() -> None:
    text = "1"
    for n in range(40):
        text = f"sum(body.a{n}, v{n} -> {text})"
    _answer(text)  # too deep or not: either answer, but no other exception
    assert _answer("count(" * 200 + "body.a" + ")" * 200) is None


@given(st.sampled_from([None, 1, 2.5, b"body.a = 1", ["body.a"], {"a": 1}]))
def test_values_that_are_not_text(value: Any) -> None:
    for call in (lambda: parse(value), lambda: parse_order(value)):
        try:
            call()
        except ExpressionError as error:
            readable(error)
            continue
        raise AssertionError(f"{value!r} was accepted")


_KINDS = (ArrayAgg, Binary, Case, Cast, Coerce, Column, Compare, Func, In, IsNull, Like, Lit,
          Logic, Not, Path, Prop, XPath)  # fmt: skip


def _walk(node: object) -> None:
    """Every node below ``node`` is of a kind the compilers know, with a known type."""
    assert isinstance(node, _KINDS), node
    assert node.type in ("boolean", "number", "text", "json", "any"), node
    for field in fields(node):
        value = getattr(node, field.name)
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            for child in item if isinstance(item, tuple) else (item,):
                if isinstance(child, _KINDS):
                    _walk(child)


# --- checked trees compile, and SQLite agrees with Python --------------------------------
_MESSAGE = {
    **MESSAGE_DEFAULTS,
    "priority": 3,
    "type": "T",
    "body": {
        "a": 1, "b": 2.5, "s": "x", "t": "12", "u": True, "n": None, "neg": -3.5,
        "o": {"k": 3, "w": "y"}, "txt": "héllo 😀", "d": "2024-02-29T10:00:00Z",
        "arr": [1, "2", 3.5, None, True, {"k": 1}],
        "lines": [{"price": 2.5, "amount": 2, "items": [1, 2]}, {"price": "3", "amount": 1},
                  {"price": 10, "amount": 0, "items": []}],
    },
}  # fmt: skip


_NUM_LEAVES = [
    "body.a", "body.b", "body.t", "body.n", "body.neg", "body.o.k", "body.arr[2]", "priority",
    "attempts", "1", "0", "-2", "2.5", "NULL", "body.missing", "x.price", "count(body.arr)",
    "sum(body.lines, l -> l.price * l.amount)", "avg(body.arr)",
]  # fmt: skip
_TEXT_LEAVES = [
    "body.s", "body.t", "body.txt", "body.d", "body.o.w", "'x'", "'12'", "''", "NULL", "type",
    "content_type", "x.price",
]  # fmt: skip
_BOOL_LEAVES = ["body.u", "TRUE", "FALSE", "NULL", "body.s", "x.price"]


def _typed(depth: int) -> dict[str, st.SearchStrategy[str]]:
    """Expressions of each type, nested up to ``depth`` levels: mostly well-typed."""
    leaves = {
        "number": st.sampled_from(_NUM_LEAVES),
        "text": st.sampled_from(_TEXT_LEAVES),
        "boolean": st.sampled_from(_BOOL_LEAVES),
    }
    if depth == 0:
        return leaves
    inner = _typed(depth - 1)
    num, text, cond = inner["number"], inner["text"], inner["boolean"]
    op = st.sampled_from

    def f(template: str, *parts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.tuples(*parts).map(lambda values: template.format(*values))

    forms = {
        "number": [
            f("({} {} {})", num, op(["+", "-", "*", "/"]), num),
            f("round({}, {})", num, op(["0", "1", "-1", "NULL"])),
            f("{}({})", op(["floor", "ceil", "abs"]), num),
            f("length({})", text),
            f("CAST({} AS {})", num | text | cond, op(["INT", "DOUBLE"])),
            f("CASE WHEN {} THEN {} ELSE {} END", cond, num, num),
            f("{}(body.lines, x -> {})", op(["sum", "min", "max", "avg", "count"]), num),
            f("{}({})", op(["year", "day", "epoch"]), text),
        ],
        "text": [
            f("({} || {})", text, text),
            f("{}({})", op(["lower", "upper", "trim"]), text),
            f("substr({}, {}, {})", text, num, num),
            f("replace({}, {}, {})", text, text, text),
            f("CAST({} AS TEXT)", num | cond | text),
            f("coalesce({}, {})", text, text),
        ],
        "boolean": [
            f("({} {} {})", num, op(["=", "<>", "<", ">="]), num),
            f("({} {} {})", text, op(["=", "<", ">="]), text),
            f("({} {} {})", cond, op(["AND", "OR", "="]), cond),
            f("NOT {}", cond),
            f("{} IS {}NULL", num | text, op(["", "NOT "])),
            f("{} {}IN ({}, {})", num, op(["", "NOT "]), num, num),
            f("{} {}LIKE {}", text, op(["", "NOT "]), op(["'%'", "'x%'", "'_'", "'%é%'", "'a[*'"])),
            f("{} BETWEEN {} AND {}", num, num, num),
            f("exists(body.lines, x -> {})", cond),
        ],
    }
    return {kind: st.one_of(leaves[kind], *forms[kind]) for kind in leaves}


_GRAMMAR = _typed(3)


@pytest.fixture(scope="module")
def sqlite_message() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    register_functions(conn)
    row = stored(_MESSAGE).columns()
    conn.execute(f"CREATE TABLE msg ({', '.join(row)})")
    conn.execute(f"INSERT INTO msg VALUES ({', '.join(':' + k for k in row)})", row)
    try:
        yield conn
    finally:
        conn.close()


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(*_GRAMMAR.values()))
def test_sqlite_agrees_with_python(sqlite_message: sqlite3.Connection, text: str) -> None:
    node = _answer(text)
    if node is None or node.type not in ("boolean", "number", "text"):
        return
    expected = normalise(compile_python(node)(python_row(_MESSAGE)), node.type)
    try:
        PostgresCompiler(schema='"sluice"').compile(node)
        compiler = SQLiteCompiler()
        sql = compiler.compile(node)
    except ExpressionError:
        return  # too large or too deep for an engine: refused, which is allowed
    (answer,) = sqlite_message.execute(f"SELECT {sql} FROM msg AS m", compiler.params).fetchone()
    actual = normalise(answer, node.type)
    assert same_value(actual, expected, rel=1e-6), f"{text}: SQLite {answer!r}, Python {expected!r}"
