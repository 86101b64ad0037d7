"""PostgreSQL prepares every statement of the backend, on a migrated schema.

Which names the code uses, and that they all exist, is checked in
tests/unit/test_statements.py; this is the PostgreSQL half of its SQLite check.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import sluice
from sluice.backends.postgres_queries import load_queries as _load_queries
from tests.conftest import drop_schema, fresh_postgres_url, postgres_base_url
from tests.postgres_server import PostgresServer
from tests.unit.test_statements import sample


@pytest.fixture
def pg_url(postgres_server: PostgresServer | str) -> Iterator[str]:
    url = fresh_postgres_url(postgres_server)
    yield url
    drop_schema(url)


def _numbered(text: str) -> str:
    """psycopg's %(name)s placeholders as PREPARE's $1, $2, ..."""
    numbers: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        return f"${numbers.setdefault(m[1], len(numbers) + 1)}"

    return re.sub(r"%\((\w+)\)s", number, text).replace("%%", "%")


def test_every_statement_prepares(pg_url: str, postgres_server: PostgresServer | str) -> None:
    with sluice.connect(pg_url):
        pass  # migrated from zero
    schema = pg_url.rsplit("schema=", 1)[1]
    ready, templates = _load_queries(schema)
    filled = {
        n: t.fill(**{h: sample("postgresql", n, h) for h in t.holes}) for n, t in templates.items()
    }
    checked = 0
    with psycopg.connect(postgres_base_url(postgres_server)) as conn:
        for name, text in [*ready.items(), *filled.items()]:
            _prepare(conn, name, text)
            checked += 1
    assert checked == len(ready) + len(templates)


def _prepare(conn: psycopg.Connection[Any], name: str, text: str) -> None:
    """Have the server parse, resolve and plan ``text``, changing nothing."""
    code = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("--"))
    copy_out = re.fullmatch(r"(?s)\s*COPY \((.*)\) TO STDOUT.*", code)
    try:
        if code.lstrip().startswith("CREATE INDEX") or " FROM STDIN" in code:
            # Not preparable: run in a transaction that is rolled back.
            with conn.transaction(force_rollback=True), conn.cursor() as cur:
                if " FROM STDIN" in text:
                    with cur.copy(text.encode()):
                        pass
                else:
                    cur.execute(text.encode())
            return
        body = copy_out[1] if copy_out else code
        conn.execute(f"PREPARE check_statement AS {_numbered(body)}".encode())
        conn.execute("DEALLOCATE check_statement")
        conn.commit()
    except psycopg.Error as exc:
        conn.rollback()
        raise AssertionError(f"statement {name!r}: {exc}\n{text}") from exc
