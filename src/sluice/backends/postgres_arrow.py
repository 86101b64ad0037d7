"""PostgreSQL rows straight into Arrow columns, for Spark's reads (ADBC's libpq driver).

Through psycopg, a Spark read made a Python object of every field and then Arrow
columns of the objects: about 2 microseconds of this process's CPU per 1 KB message,
two thirds of the read (bench/results/spark-2026-12-05.md). ADBC's PostgreSQL driver
runs a query as ``COPY (...) TO STDOUT (FORMAT binary)`` and parses that in C++ into
Arrow columns, with no object per row. It does so only for a query without bind
parameters (with them it cannot use COPY), so the query's values are written into it
as literals, quoted by psycopg (``ClientCursor.mogrify``), as the spool's COPY is.

The driver comes with the ``spark`` extra, where it is used: the PostgreSQL backend
opens one connection for these reads, in autocommit (a read holds no snapshot open
between pages), when the first is made, and again in a forked child.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import TYPE_CHECKING, Any

from sluice.errors import StorageError
from sluice.extras import load

if TYPE_CHECKING:
    import pyarrow as pa  # sluice-queue[spark]

__all__ = ["ArrowReader"]


class ArrowReader:
    """One ADBC connection for ``conninfo``, reading whole result sets as Arrow tables."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._lock = threading.Lock()
        self._conn: Any = None
        self._pid = 0

    def read(self, query: str) -> pa.Table:
        """The rows of ``query`` (no placeholders: values written in) as one Arrow table."""
        dbapi = load("adbc_driver_postgresql.dbapi", "spark", "reading PostgreSQL into Spark")
        with self._lock:
            try:
                if self._conn is None or self._pid != os.getpid():
                    # A child forked with a parent's connection must not share its socket.
                    self._conn = dbapi.connect(self._conninfo, autocommit=True)
                    self._pid = os.getpid()
                with self._conn.cursor() as cur:
                    cur.execute(query)
                    return cur.fetch_arrow_table()
            except dbapi.Error as exc:
                self._drop()  # the next read opens a fresh connection
                raise StorageError(f"reading PostgreSQL through ADBC failed: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            # Closing a broken connection: nothing more is to be done with it.
            with contextlib.suppress(Exception):
                conn.close()
