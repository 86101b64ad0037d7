"""``sluice db version | upgrade``: which schema version a database has, and upgrading it.

``sluice.connect`` migrates by itself unless told not to (``migrate=false`` on
PostgreSQL); deployments that upgrade explicitly run ``sluice db upgrade`` once, before
starting the new code everywhere. Read and upgraded here without opening a Database."""

from __future__ import annotations

import argparse
import sqlite3
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sluice import sql
from sluice.cli.options import Adder
from sluice.cli.output import emit
from sluice.connect import _split
from sluice.errors import ConfigurationError, StorageError

__all__ = ["add_commands", "schema_version", "upgrade"]


def cmd_db(args: argparse.Namespace) -> int:
    if args.action == "upgrade":
        before, after = upgrade(args.db)
        text = (
            f"schema upgraded from version {before} to {after}"
            if before != after
            else f"schema is at version {after}, this sluice's; nothing to do"
        )
        emit(args, {"before": before, "after": after}, text)
        return 0
    found, latest = schema_version(args.db)
    emit(args, {"version": found, "code": latest}, f"{found or 'none'} (this sluice: {latest})")
    return 0


def add_commands(add: Adder) -> None:
    p = add("db", cmd_db, "show the database's schema version, or upgrade it")
    p.add_argument("action", choices=["version", "upgrade"], help="what to do")
    p.set_defaults(needs_db=False)


def _dialect(url: str) -> tuple[str, str, str]:
    """(dialect, target, schema): the SQLite path, or the libpq URL and schema."""
    scheme, path, _ = _split(url)
    if scheme == "sqlite":
        return "sqlite", path, ""
    if scheme in ("postgresql", "postgres"):
        parts = urlsplit(url)
        params = parse_qsl(parts.query, keep_blank_values=True)
        schema = dict(params).get("schema", "sluice")
        libpq = [(k, v) for k, v in params if k not in _ENGINE_OPTIONS]
        return "postgresql", urlunsplit((*parts[:3], urlencode(libpq), "")), schema
    raise ConfigurationError(
        f"{url!r} has no schema to manage (memory:// lives and dies in memory)"
    )


_ENGINE_OPTIONS = {"schema", "pool_size", "migrate", "fallback", "notify_interval", "lease",
                   "poll_interval", "rotate_every", "maintenance_interval"}  # fmt: skip


def schema_version(url: str) -> tuple[int | None, int]:
    """(the database's schema version or None if it has none, this code's version)."""
    dialect, target, schema = _dialect(url)
    latest = sql.migrations(dialect)[-1][0]
    if dialect == "sqlite":
        try:
            with sqlite3.connect(f"file:{target}?mode=ro", uri=True) as conn:
                found = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise StorageError(f"{target} cannot be read: {exc}") from exc
        return (found or None), latest
    import psycopg  # noqa: PLC0415 (an optional extra)

    from sluice.backends.postgres_schema import version  # noqa: PLC0415

    try:
        with psycopg.connect(target, autocommit=True) as conn:
            return version(conn, schema), latest
    except psycopg.Error as exc:
        raise StorageError(f"cannot reach PostgreSQL: {exc}") from exc


def upgrade(url: str) -> tuple[int, int]:
    """Migrate the database's schema to this code's version: (version before, after)."""
    dialect, target, schema = _dialect(url)
    if dialect == "sqlite":
        from sluice.backends.sqlite import SQLiteBackend  # noqa: PLC0415

        try:
            before = schema_version(url)[0] or 0
        except StorageError:
            before = 0  # no file yet
        SQLiteBackend(target).close()  # opening migrates, under the write lock
        return before, sql.migrations("sqlite")[-1][0]
    import psycopg  # noqa: PLC0415

    from sluice.backends.postgres_schema import migrate  # noqa: PLC0415

    try:
        with psycopg.connect(target, autocommit=True) as conn:
            return migrate(conn, schema, upgrade=True)
    except psycopg.Error as exc:
        raise StorageError(f"cannot reach PostgreSQL: {exc}") from exc
