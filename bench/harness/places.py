"""Shared pieces of the PostgreSQL benchmarks: ``bench.postgres``, ``bench.wakeup``, ``bench.soak``.

Where the servers are, how a sluice URL maps to a libpq connection string, what the report
says about the machine and the servers, percentiles, and the clean-up of the schema a sluice
PostgreSQL URL names.
"""

from __future__ import annotations

import math
import sqlite3
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from bench.harness import machine_facts

__all__ = [
    "DEFAULT_SLUICE_URL",
    "PG_CONNINFO",
    "RABBIT_HOST",
    "RABBIT_PASSWORD",
    "RABBIT_PORT",
    "RABBIT_USER",
    "SchemaGuard",
    "drop_schema",
    "host_facts",
    "is_postgres",
    "one_line",
    "package_versions",
    "pg_conninfo",
    "pg_facts",
    "summarize",
    "url_schema",
]

# The servers of the benchmark machine: loopback only, trust authentication.
PG_CONNINFO = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_SLUICE_URL = f"{PG_CONNINFO}?schema=sluice_bench"
RABBIT_HOST = "127.0.0.1"
RABBIT_PORT = 5672
RABBIT_USER = "guest"
RABBIT_PASSWORD = "guest"  # the broker's well-known local default

# PostgreSQL settings that decide what a commit costs; all are read back from the server.
_PG_SETTINGS = (
    "fsync",
    "synchronous_commit",
    "wal_sync_method",
    "full_page_writes",
    "wal_level",
    "commit_delay",
    "shared_buffers",
    "max_connections",
)


def is_postgres(url: str) -> bool:
    """Whether a sluice URL names a PostgreSQL database."""
    return url.split("://", 1)[0] in ("postgresql", "postgres")


def url_schema(url: str) -> str | None:
    """The ``schema`` option of a sluice PostgreSQL URL, if any."""
    return dict(parse_qsl(urlsplit(url).query)).get("schema")


def pg_conninfo(url: str) -> str:
    """A libpq connection string from a sluice PostgreSQL URL: its sluice options removed."""
    parts = urlsplit(url)
    kept = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
    scheme = "postgresql" if parts.scheme == "postgres" else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(kept), ""))


def one_line(exc: BaseException) -> str:
    """An exception as one short line that fits in a Markdown table cell."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace("|", "/")
    return text if len(text) <= 200 else text[:197] + "..."


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def drop_schema(conninfo: str, schema: str) -> None:
    """DROP SCHEMA ... CASCADE, if it exists."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {_quote_ident(schema)} CASCADE")


def _schema_exists(conninfo: str, schema: str) -> bool:
    import psycopg

    with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return row is not None


class SchemaGuard:
    """Drops the schema a sluice PostgreSQL URL names after the run, if the run made it.

    A schema that existed before the benchmark started is left alone (it may be someone's);
    one that did not is the benchmark's own, whoever (the sluice backend) created it.
    """

    def __init__(self, url: str) -> None:
        self.schema = url_schema(url) if is_postgres(url) else None
        self.conninfo = pg_conninfo(url) if self.schema else ""
        self.preexisting = False
        if self.schema:
            try:
                self.preexisting = _schema_exists(self.conninfo, self.schema)
            except Exception:  # unreachable server: the sluice run will report it
                self.preexisting = True

    def cleanup(self) -> str:
        """Drop the schema if the run made it; returns a note for the report, or ''."""
        if not self.schema or self.preexisting:
            return ""
        try:
            drop_schema(self.conninfo, self.schema)
        except Exception as exc:
            return f"could not drop schema {self.schema}: {one_line(exc)}"
        return ""


def host_facts() -> list[tuple[str, str]]:
    """Machine rows of the harness's facts (date, CPU, cores, RAM, kernel, Python)."""
    wanted = ("Date", "CPU", "Cores", "RAM", "Kernel", "Python")
    facts = dict(machine_facts(Path(tempfile.gettempdir())))
    return [(key, facts[key]) for key in wanted if key in facts]


def store_facts(tmp_root: Path, systems: Sequence[str]) -> list[tuple[str, str]]:
    """The machine, and the SQLite file (and PostgreSQL, if among ``systems``) a bench's
    cases run on: the rows every sluice-on-both-backends report starts with."""
    from bench.harness import filesystem_of
    from sluice.backends.sqlite_settings import SQLiteSettings

    device, mount, fstype = filesystem_of(tmp_root)
    rows = [
        *host_facts(),
        ("SQLite library", sqlite3.sqlite_version),
        (
            "SQLite file",
            f"in {tmp_root} on {device} ({fstype}, mounted at {mount}); WAL, synchronous="
            f"{SQLiteSettings().synchronous} (sluice's default: fsync at every commit;"
            " concurrent commits of one Database share an fsync, group commit)",
        ),
    ]
    if "postgresql" in systems:
        rows += pg_facts(PG_CONNINFO)
    return rows


def package_versions(dists: Sequence[str]) -> str:
    """``name version`` for each distribution, or ``name not installed``."""
    out = []
    for dist in dists:
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist} not installed")
    return ", ".join(out)


def pg_facts(conninfo: str = PG_CONNINFO) -> list[tuple[str, str]]:
    """The PostgreSQL server's version and the settings that decide what a commit costs."""
    try:
        import psycopg

        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("SELECT version()").fetchone()
            version = str(row[0]) if row else "unknown"
            rows = conn.execute(
                "SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s) ORDER BY name",
                (list(_PG_SETTINGS),),
            ).fetchall()
    except Exception as exc:
        return [("PostgreSQL", f"unreachable at {conninfo}: {one_line(exc)}")]
    settings = ", ".join(f"{n}={s}{'' if not u else ' x ' + u}" for n, s, u in rows)
    return [("PostgreSQL", version.split(" on ")[0]), ("PostgreSQL settings", settings)]


def _rank(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence (q in 0..100)."""
    k = max(math.ceil(q / 100 * len(ordered)) - 1, 0)
    return ordered[min(k, len(ordered) - 1)]


def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, p50, p90, p99 and max of some samples (nearest rank); empty dict if none."""
    if not values:
        return {}
    ordered = sorted(values)
    return {
        "n": float(len(ordered)),
        "p50": _rank(ordered, 50),
        "p90": _rank(ordered, 90),
        "p99": _rank(ordered, 99),
        "max": ordered[-1],
    }
