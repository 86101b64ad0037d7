"""Where the benchmarks' servers are (PostgreSQL, RabbitMQ, Redis and NATS on loopback),
how a sluice URL maps to a libpq connection string, and the clean-up of the schema a sluice
PostgreSQL URL names."""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from bench.harness.report import one_line

__all__ = [
    "DEFAULT_SLUICE_URL",
    "PG_CONNINFO",
    "RABBIT_HOST",
    "RABBIT_PASSWORD",
    "RABBIT_PORT",
    "RABBIT_USER",
    "SchemaGuard",
    "answers",
    "drop_schema",
    "is_postgres",
    "pg_conninfo",
    "rabbit_params",
    "url_schema",
]

# The servers of the benchmark machine: loopback only, trust authentication.
PG_CONNINFO = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_SLUICE_URL = f"{PG_CONNINFO}?schema=sluice_bench"
RABBIT_HOST = "127.0.0.1"
RABBIT_PORT = 5672
RABBIT_USER = "guest"
RABBIT_PASSWORD = "guest"  # the broker's well-known local default


def answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def rabbit_params() -> Any:
    """pika's parameters for the local RabbitMQ."""
    import pika

    return pika.ConnectionParameters(
        host=RABBIT_HOST,
        port=RABBIT_PORT,
        credentials=pika.PlainCredentials(RABBIT_USER, RABBIT_PASSWORD),
        heartbeat=60,
    )


def rabbit_version() -> str:
    """The local RabbitMQ's version as its server says it, or why it could not be asked."""
    try:
        import pika

        conn = pika.BlockingConnection(rabbit_params())
        try:
            version = conn._impl.server_properties.get("version", b"?")
        finally:
            conn.close()
    except Exception as exc:
        return f"unreachable: {one_line(exc)}"
    return version.decode() if isinstance(version, bytes) else str(version)


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
