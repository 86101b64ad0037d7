"""Opening a SQLite file as a sluice database: recognising it, and migrating its schema.

A foreign file is refused before anything writes to it; a schema newer than
the code is refused; concurrent openers migrate once, under the write lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from sluice import sql
from sluice.errors import NotASluiceDatabase, SchemaTooNew

__all__ = ["APPLICATION_ID", "check_header", "check_owner", "migrate"]

APPLICATION_ID = 0x736C6963  # "slic": marks a file as a sluice database
_HEADER = b"SQLite format 3\x00"


def check_header(conn: sqlite3.Connection, path: str) -> None:
    """Refuse an existing file that is not SQLite at all: SQLite reads its header at the
    first statement, and nothing has written yet.

    Never by opening the file with open(): closing any descriptor of a file drops every
    POSIX lock this process holds on it, its live SQLite connections' too (another
    Database on the same file, a Spark worker's cached one). Another process then takes
    the lock that says "last one out", checkpoints and deletes the WAL under them: a
    corrupt file (sqlite.org/howtocorrupt.html, section 2.2). SQLite's own descriptors
    are closed only when its locks allow it."""
    try:
        conn.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):
            raise  # busy, I/O, full disk: the storage failing, said by the caller
        raise NotASluiceDatabase(f"{path} is not a SQLite database, so not a sluice one") from exc


def check_owner(conn: sqlite3.Connection, path: str) -> None:
    """Refuse another application's database and a schema newer than this code."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if app_id != APPLICATION_ID:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise NotASluiceDatabase(
                f"{path} is a SQLite database of another application; sluice will not write into it"
            )
        return
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    latest = sql.migrations("sqlite")[-1][0]
    if version > latest:
        raise SchemaTooNew(
            f"{path} has schema version {version}, newer than this sluice knows ({latest}); "
            "upgrade sluice to open it"
        )


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the file to the current schema; concurrent openers serialise on the write lock."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Checked again under the lock: another process may have migrated meanwhile.
        check_owner(conn, path)
        if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        steps = sql.migrations("sqlite")
        for number, script in steps:
            if number > version:
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> Iterator[str]:
    """Split a script into statements (sqlite3.execute runs one at a time)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer.strip()
            buffer = ""
    if buffer.strip():
        yield buffer.strip()
