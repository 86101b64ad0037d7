"""The rule vectors of vectors.json (rule constructors, casts and arithmetic as new bodies)
on the Python evaluator, SQLite and PostgreSQL: the same body, number by number of the
same form (issue 40: 7 here, 7.0 there), or the same run-time error, on every engine.
Spark runs them in test_vectors_spark.py."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any, Final

import pytest

import sluice
from sluice.errors import ExpressionError
from sluice.expr import Node, Relations, Scope, compile_python, parse
from sluice.expr.failing import RunTimeError, reason_in
from sluice.expr.postgres import PostgresCompiler
from sluice.expr.python_rules import json_number
from sluice.expr.sqlite import SQLiteCompiler, register_functions
from sluice.message import encode_json
from tests.conftest import drop_schema, fresh_postgres_url, postgres_base_url
from tests.postgres_server import PostgresServer

from .vectors import RuleVector, load_rule_vectors, python_row, same_json, stored

RULES: Final = Scope(relations=Relations())
VECTORS: Final = load_rule_vectors()
BODIES: Final = [v for v in VECTORS if v.raises is None]
FAILURES: Final = [v for v in VECTORS if v.raises is not None]
_NAMES: Final = (
    "body, properties, content_type, priority, enqueued_at, available_at, expires_at, "
    "attempts, type, correlation_id, reply_to"
)


def checked(vector: RuleVector) -> Node:
    return parse(vector.rule, RULES)


def body_of(node: Node, answer: Any) -> Any:
    """An engine's answer as the runner makes it a body, decoded: JSON text as it is, a
    number written as the language writes numbers (``json_number``), XML as text."""
    if node.type == "json":
        return json.loads(answer) if isinstance(answer, str) else answer
    if node.type == "number":
        return json.loads(encode_json(json_number(answer)))
    if node.type == "boolean":
        return None if answer is None else bool(answer)
    return answer


def verdict(vector: RuleVector, node: Node, answer: Any) -> None:
    assert vector.body is not None
    made, expected = body_of(node, answer), json.loads(vector.body)
    assert same_json(made, expected), f"{vector.id}: {vector.rule!r} made {answer!r}"


@pytest.fixture(scope="module")
def sqlite_conn() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    register_functions(conn)
    conn.execute(f"CREATE TABLE msg ({_NAMES})")
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture(scope="module")
def postgres_conn(postgres_server: PostgresServer | str) -> Iterator[tuple[Any, str]]:
    import psycopg

    url = fresh_postgres_url(postgres_server)
    sluice.connect(url).close()  # the migrations create the helper functions
    conn = psycopg.connect(postgres_base_url(postgres_server))
    try:
        conn.execute(
            "CREATE TEMP TABLE msg (body text, properties text, content_type text, "
            "priority bigint, enqueued_at float8, available_at float8, expires_at float8, "
            "attempts integer, type text, correlation_id text, reply_to text)"
        )
        conn.commit()
        yield conn, f'"{url.rpartition("schema=")[2]}"'
    finally:
        conn.close()
        drop_schema(url)


def on_sqlite(conn: sqlite3.Connection, vector: RuleVector) -> Any:
    compiler = SQLiteCompiler()
    sql = compiler.compile(checked(vector))
    conn.execute("DELETE FROM msg")
    conn.execute(
        f"INSERT INTO msg ({_NAMES}) VALUES (:{_NAMES.replace(', ', ', :')})",
        stored(vector.message).columns(),
    )
    (answer,) = conn.execute(f"SELECT {sql} FROM msg AS m", compiler.params).fetchone()
    return answer


def on_postgres(conn: Any, schema: str, vector: RuleVector) -> Any:
    compiler = PostgresCompiler(schema=schema)
    sql = compiler.compile(checked(vector))
    row = stored(vector.message).columns()
    placeholders = ", ".join(f"%({name})s" for name in row)
    try:
        conn.execute(f"INSERT INTO msg ({_NAMES}) VALUES ({placeholders})", row)
        (answer,) = conn.execute(f"SELECT {sql} FROM msg AS m", compiler.params).fetchone()
    finally:
        conn.rollback()
    return answer


def test_there_are_rule_vectors_of_both_kinds() -> None:
    assert len(BODIES) >= 25
    assert len(FAILURES) >= 8


@pytest.mark.parametrize("vector", BODIES, ids=lambda v: v.id)
def test_python(vector: RuleVector) -> None:
    node = checked(vector)
    verdict(vector, node, compile_python(node)(python_row(vector.message)))


@pytest.mark.parametrize("vector", BODIES, ids=lambda v: v.id)
def test_sqlite(vector: RuleVector, sqlite_conn: sqlite3.Connection) -> None:
    verdict(vector, checked(vector), on_sqlite(sqlite_conn, vector))


@pytest.mark.parametrize("vector", BODIES, ids=lambda v: v.id)
def test_postgresql(vector: RuleVector, postgres_conn: tuple[Any, str]) -> None:
    verdict(vector, checked(vector), on_postgres(*postgres_conn, vector))


@pytest.mark.parametrize("vector", FAILURES, ids=lambda v: v.id)
def test_python_raises(vector: RuleVector) -> None:
    node = checked(vector)
    with pytest.raises(RunTimeError) as caught:
        compile_python(node)(python_row(vector.message))
    assert caught.value.reason == vector.raises


@pytest.mark.parametrize("vector", FAILURES, ids=lambda v: v.id)
def test_sqlite_raises(vector: RuleVector, sqlite_conn: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.Error) as caught:
        on_sqlite(sqlite_conn, vector)
    assert reason_in(str(caught.value)) == vector.raises, str(caught.value)


@pytest.mark.parametrize("vector", FAILURES, ids=lambda v: v.id)
def test_postgresql_raises(vector: RuleVector, postgres_conn: tuple[Any, str]) -> None:
    import psycopg

    with pytest.raises(psycopg.Error) as caught:
        on_postgres(*postgres_conn, vector)
    assert reason_in(str(caught.value)) == vector.raises, str(caught.value)


@pytest.mark.parametrize(
    "text",
    ["body.n / body.zero > 1", "CAST(body.s AS DOUBLE) > 1", "CAST(body.s AS BOOLEAN)"],
)
def test_outside_rules_a_failure_is_null(text: str, sqlite_conn: sqlite3.Connection) -> None:
    """A selector is no rule: what fails there is NULL (not matched), never an error that
    a message would raise at every dequeue."""
    node = parse(text)
    message = {**BODIES[0].message, "body": {"n": 4, "zero": 0, "s": "abc"}}
    vector = RuleVector("selector", text, message)
    assert compile_python(node)(python_row(message)) is None
    compiler = SQLiteCompiler()
    sql = compiler.compile(node)
    conn = sqlite_conn
    conn.execute("DELETE FROM msg")
    conn.execute(
        f"INSERT INTO msg ({_NAMES}) VALUES (:{_NAMES.replace(', ', ', :')})",
        stored(vector.message).columns(),
    )
    assert conn.execute(f"SELECT {sql} FROM msg AS m", compiler.params).fetchone() == (None,)


def test_a_run_time_error_is_an_expression_error() -> None:
    assert issubclass(RunTimeError, ExpressionError)
    assert reason_in("sqlite: JSON path error near '<<sluice: it''s>>'") == "it's"
    assert reason_in('invalid input syntax for type double precision: "<<sluice: a>>"') == "a"
    assert reason_in("no marks") is None
