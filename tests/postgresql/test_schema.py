"""The PostgreSQL schema: migrating from zero gives exactly schema.sql.

The other tests' schemas are made from schema.sql (``create_current``), so this
is where the numbered migrations run from zero, once per run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import sluice
from sluice.backends.postgres_schema import create_current, latest_version, migrate
from tests.conftest import (
    current_postgres_url,
    drop_schema,
    fresh_postgres_url,
    postgres_base_url,
    schema_of,
)
from tests.postgres_server import PostgresServer

_CATALOG = {
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, c.relispartition, c.reloptions::text,
               pg_get_expr(c.relpartbound, c.oid), pg_get_partkeydef(c.oid),
               CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END
        FROM pg_class c WHERE c.relnamespace = %(ns)s::regnamespace ORDER BY 1""",
    # Positions among the live columns: a migrated table keeps its dropped ones.
    "columns": """
        SELECT c.relname, a.attname,
               row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
               format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, co.collname
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation co ON co.oid = a.attcollation
        WHERE c.relnamespace = %(ns)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY 1, 3""",
    "constraints": """
        SELECT coalesce(c.relname, ''), con.conname, con.contype, pg_get_constraintdef(con.oid)
        FROM pg_constraint con LEFT JOIN pg_class c ON c.oid = con.conrelid
        WHERE con.connamespace = %(ns)s::regnamespace ORDER BY 1, 2""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = %(ns)s ORDER BY 1, 2""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid)
        FROM pg_proc p WHERE p.pronamespace = %(ns)s::regnamespace ORDER BY 1, 2""",
    "sequences": """
        SELECT sequencename, data_type::text, start_value, min_value, max_value, increment_by,
               cycle, cache_size, last_value
        FROM pg_sequences WHERE schemaname = %(ns)s ORDER BY 1""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = %(ns)s::regnamespace AND NOT t.tgisinternal ORDER BY 1, 2""",
    # Types of their own (enums, domains, ...), not the row and array types of tables.
    "types": """
        SELECT t.typname, t.typtype, format_type(t.typbasetype, t.typtypmod),
               array(SELECT e.enumlabel FROM pg_enum e
                     WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder)::text
        FROM pg_type t
        WHERE t.typnamespace = %(ns)s::regnamespace AND t.typrelid = 0 AND t.typcategory <> 'A'
        ORDER BY 1""",
}


def _catalog(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything sluice keeps in ``schema``, with the schema's name written as S."""
    found = {
        part: conn.execute(query, {"ns": schema}).fetchall() for part, query in _CATALOG.items()
    }
    # Rows too: the seed rows (rotation's) and the recorded version.
    tables = [r[0] for r in found["relations"] if r[1] in ("r", "p") and not r[3]]
    found["rows"] = []
    for table in tables:
        contents = conn.execute(
            "SELECT coalesce(jsonb_agg(to_jsonb(t) ORDER BY to_jsonb(t)::text), '[]')::text "
            f'FROM "{schema}"."{table}" AS t'
        ).fetchone()
        found["rows"].append((table, contents[0] if contents else None))
    name = re.compile(rf'"?\b{re.escape(schema)}\b"?')

    def anonymous(value: Any) -> Any:
        if isinstance(value, str):
            return name.sub("S", value)
        if isinstance(value, tuple):
            return tuple(anonymous(v) for v in value)
        return value

    return {part: [anonymous(row) for row in rows] for part, rows in found.items()}


@pytest.fixture
def admin(postgres_server: PostgresServer | str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_base_url(postgres_server), autocommit=True) as conn:
        yield conn


def test_migrations_from_zero_equal_the_schema(
    postgres_server: PostgresServer | str, admin: psycopg.Connection[Any]
) -> None:
    migrated, current = fresh_postgres_url(postgres_server), fresh_postgres_url(postgres_server)
    try:
        assert migrate(admin, schema_of(migrated)) == (0, latest_version())
        create_current(admin, schema_of(current))
        expected = _catalog(admin, schema_of(current))
        assert _catalog(admin, schema_of(migrated)) == expected
        assert all(expected[part] for part in ("relations", "columns", "functions", "sequences"))
        assert ("schema_version", f'[{{"version": {latest_version()}}}]') in expected["rows"]
    finally:
        drop_schema(migrated)
        drop_schema(current)


def test_a_schema_made_current_is_used_without_migrating(
    postgres_server: PostgresServer | str,
) -> None:
    url = current_postgres_url(postgres_server)
    try:
        # migrate=false refuses a schema older than the code, so this one is current.
        with sluice.connect(url + "&migrate=false") as db:
            orders = db.create_queue("orders")
            orders.put("o1")
            assert orders.stats()["ready"] == 1
    finally:
        drop_schema(url)


def test_a_schema_that_exists_is_not_made_again(
    postgres_server: PostgresServer | str, admin: psycopg.Connection[Any]
) -> None:
    url = current_postgres_url(postgres_server)
    try:
        with pytest.raises(sluice.StorageError, match="refused to create schema"):
            create_current(admin, schema_of(url))
    finally:
        drop_schema(url)
