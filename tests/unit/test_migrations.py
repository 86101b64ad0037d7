"""Numbered migrations from zero give exactly the packaged schema.

PostgreSQL's comparison needs a server: tests/postgresql/test_schema.py.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

import sluice
from sluice import sql


def _objects(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
    )
    # ALTER TABLE ADD COLUMN leaves its own spacing in the stored text: compare tokens.
    return [(t, n, re.sub(r"\s+([,)])", r"\1", " ".join(s.split()))) for t, n, s in rows]


def test_migrations_from_zero_equal_schema(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'migrated.db'}"):
        pass
    migrated = sqlite3.connect(tmp_path / "migrated.db")
    fresh = sqlite3.connect(":memory:")
    fresh.executescript(sql.schema("sqlite"))
    assert _objects(migrated) == _objects(fresh)
    assert migrated.execute("PRAGMA user_version").fetchone()[0] == sql.migrations("sqlite")[-1][0]
    migrated.close()
    fresh.close()


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_migrations_are_numbered_without_gaps(dialect: str) -> None:
    numbers = [n for n, _ in sql.migrations(dialect)]
    assert numbers == list(range(1, len(numbers) + 1))
