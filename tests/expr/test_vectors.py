"""Every vector of vectors.json on every engine: the Python evaluator (the
reference), SQLite and PostgreSQL must all give the value the language defines,
and every refused expression must be refused the same way whatever the engine."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import sluice
from sluice.errors import ExpressionError
from sluice.expr import Node, compile_python, parse
from sluice.expr.postgres import PostgresCompiler
from sluice.expr.sqlite import SQLiteCompiler, register_functions
from tests.conftest import drop_schema, fresh_postgres_url, postgres_base_url
from tests.postgres_server import PostgresServer

from .vectors import Vector, load_vectors, normalise, python_row, same_value, stored

VECTORS = load_vectors()
VALUES = [v for v in VECTORS if v.error is None]
ERRORS = [v for v in VECTORS if v.error is not None]

_COLUMNS = (
    "body text, properties text, content_type text, priority bigint, "
    "enqueued_at {real}, available_at {real}, expires_at {real}, attempts integer, "
    "type text, correlation_id text, reply_to text"
)
_NAMES = (
    "body, properties, content_type, priority, enqueued_at, available_at, expires_at, "
    "attempts, type, correlation_id, reply_to"
)


def _checked(vector: Vector) -> Node:
    node = parse(vector.expr, want=vector.want)
    assert node.type in ("boolean", "number", "text"), f"{vector.expr!r} is {node.type}"
    return node


def _verdict(vector: Vector, node: Node, answer: Any) -> None:
    actual = normalise(answer, node.type)
    assert same_value(actual, vector.expected), (
        f"{vector.id}: {vector.expr!r} gave {answer!r}, expected {vector.expected!r}"
    )


# --- the engines ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sqlite_conn() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    register_functions(conn)
    conn.execute(f"CREATE TABLE msg ({_COLUMNS.format(real='real')})")
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture(scope="session")
def postgres_conn(postgres_server: PostgresServer | str) -> Iterator[tuple[Any, str]]:
    """One migrated schema for the whole run, and a connection with a one-row table."""
    import psycopg

    url = fresh_postgres_url(postgres_server)
    sluice.connect(url).close()  # the migrations create the helper functions
    schema = url.rpartition("schema=")[2]
    conn = psycopg.connect(postgres_base_url(postgres_server))
    try:
        conn.execute(f"CREATE TEMP TABLE msg ({_COLUMNS.format(real='float8')})")
        conn.commit()
        yield conn, f'"{schema}"'
    finally:
        conn.close()
        drop_schema(url)


def _sqlite(conn: sqlite3.Connection, node: Node, vector: Vector) -> Any:
    compiler = SQLiteCompiler()
    sql = compiler.compile(node)
    row = stored(vector.message).columns()
    conn.execute("DELETE FROM msg")
    conn.execute(f"INSERT INTO msg ({_NAMES}) VALUES (:{_NAMES.replace(', ', ', :')})", row)
    (answer,) = conn.execute(f"SELECT {sql} FROM msg AS m", compiler.params).fetchone()
    return answer


def _postgres(conn: Any, schema: str, node: Node, vector: Vector) -> Any:
    compiler = PostgresCompiler(schema=schema)
    sql = compiler.compile(node)
    row = stored(vector.message).columns()
    placeholders = ", ".join(f"%({name})s" for name in row)
    try:
        conn.execute(f"INSERT INTO msg ({_NAMES}) VALUES ({placeholders})", row)
        (answer,) = conn.execute(f"SELECT {sql} FROM msg AS m", compiler.params).fetchone()
    finally:
        conn.rollback()
    return answer


# --- the tests -----------------------------------------------------------------------------
def test_vector_ids_are_unique_and_plenty() -> None:
    duplicates = [i for i, n in Counter(v.id for v in VECTORS).items() if n > 1]
    assert not duplicates
    assert len(VALUES) >= 150
    assert len(ERRORS) >= 15


@pytest.mark.parametrize("vector", VALUES, ids=lambda v: v.id)
def test_python(vector: Vector) -> None:
    node = _checked(vector)
    _verdict(vector, node, compile_python(node)(python_row(vector.message)))


@pytest.mark.parametrize("vector", VALUES, ids=lambda v: v.id)
def test_sqlite(vector: Vector, sqlite_conn: sqlite3.Connection) -> None:
    node = _checked(vector)
    _verdict(vector, node, _sqlite(sqlite_conn, node, vector))


@pytest.mark.parametrize("vector", VALUES, ids=lambda v: v.id)
def test_postgresql(vector: Vector, postgres_conn: tuple[Any, str]) -> None:
    node = _checked(vector)
    conn, schema = postgres_conn
    _verdict(vector, node, _postgres(conn, schema, node, vector))


@pytest.mark.parametrize("vector", ERRORS, ids=lambda v: v.id)
def test_refused(vector: Vector) -> None:
    assert vector.error is not None
    with pytest.raises(ExpressionError) as caught:
        parse(vector.expr)
    assert vector.error in str(caught.value), str(caught.value)
