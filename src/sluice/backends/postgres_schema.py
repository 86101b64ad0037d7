"""The sluice schema in a PostgreSQL database: creating it, migrating it, refusing a newer one.

Migrations run in one transaction under an advisory lock, so concurrent
starters migrate once. The version lives in ``<schema>.schema_version``, kept
apart from the migrations as SQLite's ``user_version`` is.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import psycopg

from sluice import sql
from sluice.errors import ConfigurationError, SchemaTooNew, SchemaTooOld, StorageError

__all__ = [
    "CREDIT_LOCK_CLASS",
    "LOCK_CLASS",
    "MESSAGES_TABLE",
    "RULES_LOCK_CLASS",
    "SchemaState",
    "create_current",
    "latest_version",
    "migrate",
    "quote_schema",
    "recovery_lock",
    "schema_key",
    "version",
]

LOCK_CLASS = 0x736C6963
"""The first key of every sluice advisory lock ("slic"), apart from other applications' locks."""
CREDIT_LOCK_CLASS = LOCK_CLASS + 1
"""Advisory locks counting a capped queue's credit (docs/delivery.md): the first key of a
queue's credit lock (the second is the queue's id), apart from its commit lock, so claims
of a capped queue never wait for its enqueues."""
RULES_LOCK_CLASS = LOCK_CLASS + 2
"""Advisory locks serialising the rules engines of a queue whose rules read relations."""


def schema_key(schema: str) -> int:
    """A schema's number in its advisory lock keys (26 bits, so that each kind of key
    keeps a range of its own: ``recovery_lock``, ``maintenance_locks``)."""
    return zlib.crc32(schema.encode()) & 0x3FFFFFF


def recovery_lock(schema: str) -> int:
    """The second key of a schema's recovery lock (its first is ``LOCK_CLASS``).

    Per schema: with one key for the whole database, a recovery running in another
    schema made this one's skip, and ``db.recover()`` reported nothing rolled back while
    a dead session waited (a test that ran beside others in the same database found it).
    Negative and below the maintenance locks' keys (``maintenance_locks``: -2 to
    -134,217,729), apart from the queues' keys (their ids) and the migrations' (-1).
    """
    return -(1 << 28) - schema_key(schema)


MESSAGES_TABLE = (
    ("id", "int"), ("slot", "int"), ("queue_id", "int"), ("state", "int"), ("priority", "int"),
    ("p_session", "int"), ("p_tx", "int"), ("p_num", "int"), ("c_session", "int"),
    ("c_tx", "int"), ("body", "text"), ("body_bytes", "bytes"), ("content_type", "text"),
    ("properties", "text"), ("correlation_id", "text"), ("reply_to", "text"),
    ("enqueued_at", "float"), ("available_at", "float"), ("expires_at", "float"),
    ("attempts", "int"), ("error", "text"), ("origin_queue", "text"), ("type", "text"),
    ("t1", "text"), ("t2", "text"), ("t3", "text"), ("t4", "text"), ("n1", "float"),
    ("n2", "float"), ("n3", "float"), ("n4", "float"), ("grp", "text"), ("lane", "text"),
    ("ref", "int"), ("settled_at", "float"),
)  # fmt: skip
"""Every column of ``messages`` (schema.sql) with its kind, in table order."""

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

SchemaState = tuple[int, int]
"""(version found, version of this code)."""


def quote_schema(name: str) -> str:
    """The schema name as a quoted identifier; only plain lower-case names are accepted."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ConfigurationError(
            f"schema {name!r} is not a plain lower-case SQL name "
            "(letters, digits and _, not starting with a digit, at most 63)"
        )
    return f'"{name}"'


def latest_version() -> int:
    return sql.migrations("postgresql")[-1][0]


def version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The schema's version, None where sluice has not created it yet."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{quote_schema(schema)}.schema_version",)
    ).fetchone()
    if not row or not row[0]:
        return None
    found = conn.execute(f"SELECT version FROM {quote_schema(schema)}.schema_version").fetchone()
    return int(found[0]) if found else 0


def migrate(conn: psycopg.Connection[Any], schema: str, *, upgrade: bool = True) -> SchemaState:
    """Bring ``schema`` to this code's version; returns (version before, version now).

    A schema newer than the code raises SchemaTooNew. With ``upgrade`` False an
    older (but existing) schema is refused (SchemaTooOld) instead of migrated, for deployments
    that upgrade explicitly with ``sluice db upgrade``.
    """
    quoted = quote_schema(schema)
    latest = latest_version()
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, -1)", (LOCK_CLASS,))
            found = version(conn, schema)
            before = found or 0
            if before > latest:
                raise SchemaTooNew(
                    f"schema {schema!r} is at version {before}, newer than this sluice knows "
                    f"({latest}); upgrade sluice to use it"
                )
            if before == latest:
                return before, before
            if found is not None and not upgrade:
                raise SchemaTooOld(
                    f"schema {schema!r} is at version {before} and this sluice needs {latest}; "
                    "run `sluice db upgrade` (or connect with migrate=true)"
                )
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
            for number, script in sql.migrations("postgresql"):
                if number > before:
                    conn.execute(script.replace("{schema}", quoted).encode())
            _record_version(conn, quoted, latest)
            return before, latest
    except psycopg.Error as exc:
        raise StorageError(f"PostgreSQL refused to set up schema {schema!r}: {exc}") from exc


def create_current(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create ``schema`` at this code's version from schema.sql, in one transaction.

    For whoever makes many schemas (the tests make one per test): one script
    instead of every migration in turn, and ``migrate`` then finds nothing to
    do. The schema must not exist yet.
    """
    quoted = quote_schema(schema)
    try:
        with conn.transaction():
            script = sql.schema("postgresql").replace("{schema}", quoted)
            conn.execute(f"CREATE SCHEMA {quoted};\n{script}".encode())
            _record_version(conn, quoted, latest_version())
    except psycopg.Error as exc:
        raise StorageError(f"PostgreSQL refused to create schema {schema!r}: {exc}") from exc


def _record_version(conn: psycopg.Connection[Any], quoted: str, number: int) -> None:
    conn.execute(f"CREATE TABLE IF NOT EXISTS {quoted}.schema_version (version integer NOT NULL)")
    conn.execute(f"DELETE FROM {quoted}.schema_version")
    conn.execute(f"INSERT INTO {quoted}.schema_version VALUES (%s)", (number,))
