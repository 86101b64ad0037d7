"""What the checker makes of an expression, and the limits every compiler keeps
(the values themselves are in vectors.json)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from sluice.errors import ExpressionError
from sluice.expr import Scope, compile_python, parse, parse_order
from sluice.expr.check import MAX_NODES
from sluice.expr.nodes import Func, IsNull, Like, Lit, Logic, Node, Not, Prop
from sluice.expr.postgres import PostgresCompiler
from sluice.expr.sql import MAX_SQL_LENGTH, Source
from sluice.expr.sqlite import SQLiteCompiler, register_functions

from .vectors import MESSAGE_DEFAULTS, python_row


def _nested(template: str, depth: int, leaf: str = "body.a") -> str:
    text = leaf
    for _ in range(depth):
        text = template.format(text)
    return text


# --- the checked tree ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "negated"),
    [
        ("body.a LIKE 'x%'", False),
        ("body.a NOT LIKE 'x%'", True),
        ("NOT body.a LIKE 'x%'", True),
        ("NOT body.a NOT LIKE 'x%'", False),
    ],
)
def test_not_like_is_negated(text: str, negated: bool) -> None:
    node = parse(text)
    assert isinstance(node, Like)
    assert node.negated is negated


@pytest.mark.parametrize(
    ("text", "negated"),
    [("body.a ISNULL", False), ("body.a NOTNULL", True), ("body.a IS NOT NULL", True)],
)
def test_postfix_null_tests(text: str, negated: bool) -> None:
    node = parse(text)
    assert isinstance(node, IsNull)
    assert node.negated is negated


def test_not_between_is_a_negation() -> None:
    node = parse("body.n NOT BETWEEN 1 AND 5")
    assert isinstance(node, Not)
    assert isinstance(node.arg, Logic)


@pytest.mark.parametrize("target", ["DOUBLE", "INT", "TEXT", "BOOLEAN"])
def test_cast_of_null_is_a_typed_null(target: str) -> None:
    node = parse(f"CAST(NULL AS {target})")
    inner = node.args[0] if isinstance(node, Func) else node  # INT truncates: trunc(NULL)
    assert isinstance(inner, Lit)
    assert inner.value is None
    assert inner.type == node.type != "any"


def test_a_chain_of_or_is_one_logic() -> None:
    node = parse(" OR ".join(f"body.n = {i}" for i in range(200)))
    assert isinstance(node, Logic)
    assert len(node.args) == 200


def test_parenthesised_chains_keep_their_meaning() -> None:
    node = parse("(body.a = 1 OR body.b = 2) AND body.c = 3")
    assert isinstance(node, Logic)
    assert node.op == "and"
    assert [type(a).__name__ for a in node.args] == ["Logic", "Compare"]


def test_want_types_a_path() -> None:
    assert parse("body.total", want="number").type == "number"
    with pytest.raises(ExpressionError, match="where a text is expected"):
        parse("1 + 1", want="text")


@pytest.mark.parametrize(
    ("text", "descending"),
    [("body.a", False), ("body.a ASC", False), ("body.a desc", True), ("priority  DESC ", True)],
)
def test_order_keys(text: str, descending: bool) -> None:
    _, desc = parse_order(text)
    assert desc is descending


def test_an_object_cannot_order() -> None:
    with pytest.raises(ExpressionError):
        parse_order("body.a = body.b")


@pytest.mark.parametrize("value", [None, 1, b"body.a = 1", ["body.a"]])
def test_only_text_is_parsed(value: Any) -> None:
    with pytest.raises(ExpressionError, match="must be a str"):
        parse(value)


# --- limits --------------------------------------------------------------------------------
def test_expressions_that_expand_exponentially_are_refused() -> None:
    # BETWEEN uses its operand twice: nested, the tree doubles at every level.
    text = _nested("CAST(({}) BETWEEN 0 AND 1 AS INT)", 20)
    assert len(text) < 1000
    with pytest.raises(ExpressionError, match=f"at most {MAX_NODES}"):
        parse(text)


def test_sql_that_grows_too_large_is_refused() -> None:
    # PostgreSQL spells round's digits three times; nested that triples per level.
    node = parse(_nested("round(1, {})", 14, "1"))
    with pytest.raises(ExpressionError, match=f"over {MAX_SQL_LENGTH} characters"):
        PostgresCompiler(schema='"sluice"').compile(node)


def test_sqlite_refuses_what_its_parser_cannot_nest() -> None:
    node = parse(_nested("CASE WHEN body.t THEN {} + 1 ELSE 0 END", 12))
    PostgresCompiler(schema='"sluice"').compile(node)  # PostgreSQL takes it
    with pytest.raises(ExpressionError, match="too deeply for SQLite"):
        SQLiteCompiler().compile(node)


def test_what_sqlite_parses_is_not_refused() -> None:
    node = parse(_nested("CASE WHEN body.t THEN {} + 1 ELSE 0 END", 5))
    compiler = SQLiteCompiler()
    sql = compiler.compile(node)
    conn = sqlite3.connect(":memory:")
    register_functions(conn)
    row = conn.execute(
        f'SELECT {sql} FROM (SELECT \'{{"a": 1, "t": true}}\' AS body, NULL AS content_type) AS m',
        compiler.params,
    ).fetchone()
    conn.close()
    assert row == (6,)


# --- declared properties -------------------------------------------------------------------
def test_declared_properties_read_their_stored_columns() -> None:
    scope = Scope(properties={"customer": "text", "vip": "boolean", "total": "number"})
    node = parse("customer = 'Smith' AND vip AND total > 10", scope)
    assert _props(node) == {"customer", "vip", "total"}

    row = {**python_row(MESSAGE_DEFAULTS)}
    row["properties"] = {"customer": "Smith", "vip": True, "total": 12.5}
    assert compile_python(node)(row) is True

    compiler = SQLiteCompiler(Source(properties={"customer": "t1", "vip": "n1", "total": "n2"}))
    sql = compiler.compile(node)
    conn = sqlite3.connect(":memory:")
    register_functions(conn)
    (value,) = conn.execute(
        f"SELECT {sql} FROM (SELECT 'Smith' AS t1, 1.0 AS n1, 12.5 AS n2) AS m", compiler.params
    ).fetchone()
    conn.close()
    assert value == 1


def _props(node: Node) -> set[str]:
    if isinstance(node, Prop):
        return {node.name}
    found: set[str] = set()
    for child in getattr(node, "args", ()) or ():
        found |= _props(child)
    for name in ("left", "right", "arg"):
        child = getattr(node, name, None)
        if child is not None:
            found |= _props(child)
    return found


# --- XML -----------------------------------------------------------------------------------
def test_xpath_text_is_a_plain_str() -> None:
    # lxml's own string results keep the whole parsed document alive.
    row = {**python_row(MESSAGE_DEFAULTS), "content_type": "application/xml", "raw": "<a>x</a>"}
    value = compile_python(parse("xpath(body, '/a')"))(row)
    assert type(value) is str
    assert value == "x"
