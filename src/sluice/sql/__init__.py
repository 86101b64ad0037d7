"""Packaged SQL: per dialect a schema, numbered migrations and named statements.

Statements are sections of ``queries.sql`` (the queue engine), ``topics.sql``,
``jobs.sql`` (jobs and tasks), ``rules.sql`` (the rules engine) and ``keys.sql`` (the
server's API keys). Those both dialects share are written once in ``common/``, with
SQLite's ``:name`` placeholders; ``sqlite/`` and ``postgresql/`` hold only what really
differs, each in its driver's style (``:name``, ``%(name)s``), and have no file where
nothing differs. A name is defined in one file only: the loader refuses a second
definition instead of letting one win.

At load, and only then, a statement is made ready to run:

- ``{schema}.table`` becomes the quoted schema's table on PostgreSQL, the bare table
  on SQLite; common text gets psycopg's placeholders and ``%%`` for ``%``;
- ``{fragment}`` becomes fixed text defined once: a ``-- fragment: x`` section of the
  files, or a fragment the backend gives (the column lists it reads rows by).

Holes for what is compiled at run time from user expressions are the only braces
left, and only a :class:`Template` fills them: ``{select}`` (a selection's condition,
" AND ..." or nothing), ``{order}`` (its ordering keys, each followed by ", ", or
nothing; the delivery order after them breaks their ties), ``{value}`` (a declared
property's value expression), ``{columns}``, ``{parts}`` and ``{rows}`` (the rules
engine's evaluated columns and its enqueues by SQL, rules.sql) and ``{done}`` (the
statement that settles the batch those enqueues are made for).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["HOLES", "Template", "migrations", "schema", "statements", "templates"]

DIALECTS = ("sqlite", "postgresql")
HOLES = frozenset({"select", "order", "value", "selector", "columns", "parts", "rows", "done"})
"""The holes a statement may leave for run time (see the module docstring)."""
_SELECTION = frozenset({"select", "order"})

_FILES = (
    "queries.sql",
    "topics.sql",
    "jobs.sql",
    "rules.sql",
    "keys.sql",
    "idempotency.sql",
    "gateways.sql",
    "sqs.sql",
)
"""Per folder: the queue engine's statements, then those of topics, jobs and tasks, the
rules engine, API keys, idempotency keys, gateways and the SQS endpoint."""
_FOLDERS = ("common", "{dialect}")

_SECTION = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)
_BRACE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_COLON_PARAM = re.compile(r"(?<![:\w]):([a-z_]\w*)")  # not a ::cast


@dataclass(frozen=True, slots=True)
class Template:
    """A statement with holes for compiled user expressions, filled at run time."""

    name: str
    text: str
    holes: frozenset[str]

    def fill(self, **values: str) -> str:
        """The statement with each hole replaced by its value; every hole needs one."""
        if set(values) != self.holes:
            raise ValueError(
                f"statement {self.name!r} has holes {sorted(self.holes)}, "
                f"but was given {sorted(values)}"
            )
        return _BRACE.sub(lambda m: values[m[1]], self.text)

    def fill_selection(self, select: str, order: str) -> str:
        """The statement shaped by a compiled selection (its condition and order keys).

        A statement that keeps an order of its own (``scan``, by id) has no ``order``
        hole, and its order stands.
        """
        values = {"select": select, "order": order}
        return self.fill(**{hole: values[hole] for hole in self.holes})


def _read(folder: str, filename: str) -> str:
    entry = resources.files(__package__).joinpath(folder, filename)
    if filename in _FILES and not entry.is_file():
        return ""  # a folder has no statements file where it has nothing to add
    return entry.read_text("utf-8")


def _to_psycopg(text: str) -> str:
    """Common text in psycopg's style: ``%(name)s`` placeholders, ``%%`` for ``%``."""
    # psycopg reads placeholders in comments too: % is doubled everywhere, while
    # ":name" in a comment is prose.
    return "\n".join(
        line.replace("%", "%%")
        if line.lstrip().startswith("--")
        else _COLON_PARAM.sub(r"%(\1)s", line.replace("%", "%%"))
        for line in text.split("\n")
    )


def _uncommented(text: str) -> str:
    return "\n".join(line for line in text.split("\n") if not line.startswith("--")).strip()


@cache
def _sections(dialect: str) -> tuple[dict[str, str], dict[str, str]]:
    """The dialect's statements and fragments by name, placeholders translated."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}: one of {', '.join(DIALECTS)}")
    found: tuple[dict[str, str], dict[str, str]] = ({}, {})
    origin: dict[str, str] = {}
    for filename in _FILES:
        for folder in (f.format(dialect=dialect) for f in _FOLDERS):
            text = _read(folder, filename)
            if folder == "common" and dialect == "postgresql":
                text = _to_psycopg(text)
            parts = _SECTION.split(text)
            for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
                where = f"sluice/sql/{folder}/{filename}"
                if name in origin:
                    raise ValueError(f"{name!r} is defined in {origin[name]} and again in {where}")
                origin[name] = where
                found[kind == "fragment"][name] = body.strip()
    return found


def _load(dialect: str, schema: str | None, given: Mapping[str, str]) -> dict[str, Template]:
    named, defined = _sections(dialect)
    if (schema is None) != (dialect == "sqlite"):
        raise ValueError("PostgreSQL statements need the quoted schema; SQLite's take none")
    if clash := sorted(set(given) & set(defined)):
        raise ValueError(f"fragments {clash} are defined in the SQL files already")

    def expand(name: str, text: str, fragments: Mapping[str, str]) -> str:
        if schema is None:
            text = text.replace("{schema}.", "")

        def one(m: re.Match[str]) -> str:
            word = m[1]
            if word == "schema" and schema is not None:
                return schema
            if word in fragments:
                return fragments[word]
            if word in HOLES:
                return m[0]
            raise ValueError(f"{{{word}}} in {name!r} is neither a fragment nor a hole")

        return _BRACE.sub(one, text)

    # A fragment's own comments say what it is; only its text goes into statements. A
    # fragment may use those defined before it (in file order).
    fragments = dict(given)
    for name, body in defined.items():
        fragments[name] = expand(name, _uncommented(body), fragments)
    loaded = {}
    for name, body in named.items():
        text = expand(name, body, fragments)
        loaded[name] = Template(name, text, frozenset(m[1] for m in _BRACE.finditer(text)))
    return loaded


def statements(
    dialect: str, *, schema: str | None = None, fragments: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Every statement of ``dialect`` ready to run, by name.

    ``schema`` is PostgreSQL's quoted schema name; ``fragments`` are the fixed texts the
    backend defines (``{message_columns}``, ...). A statement with selection holes is
    here as it runs without a selection; one with other holes is only in
    :func:`templates`.
    """
    ready = {}
    for name, template in _load(dialect, schema, fragments or {}).items():
        if template.holes <= _SELECTION:
            ready[name] = template.fill(**dict.fromkeys(template.holes, ""))
    return ready


def templates(
    dialect: str, *, schema: str | None = None, fragments: Mapping[str, str] | None = None
) -> dict[str, Template]:
    """The statements of ``dialect`` that have holes, by name (see :func:`statements`)."""
    loaded = _load(dialect, schema, fragments or {})
    return {name: t for name, t in loaded.items() if t.holes}


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
