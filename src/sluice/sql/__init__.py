"""Packaged SQL: per dialect a schema, numbered migrations and named queries."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

__all__ = ["migrations", "queries", "schema"]

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _read(dialect: str, filename: str) -> str:
    return resources.files(__package__).joinpath(dialect, filename).read_text("utf-8")


_QUERY_FILES = ("queries.sql", "jobs.sql")
"""Per dialect: the queue engine's queries, then those of jobs and tasks."""


@cache
def queries(dialect: str) -> dict[str, str]:
    """The named queries of a dialect: ``-- name: x`` starts section ``x``."""
    named: dict[str, str] = {}
    for filename in _QUERY_FILES:
        parts = _NAME.split(_read(dialect, filename))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in named:
                raise ValueError(f"query {name!r} is defined twice in sluice/sql/{dialect}")
            named[name] = body.strip()
    return named


def schema(dialect: str) -> str:
    """The complete current schema of a dialect."""
    return _read(dialect, "schema.sql")


def migrations(dialect: str) -> list[tuple[int, str]]:
    """The numbered migrations of a dialect, in order, as (version, sql)."""
    folder = resources.files(__package__).joinpath(dialect, "migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.read_text("utf-8")))
    return sorted(found)
