"""Fixtures shared by all tests: a Database on every backend."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import sluice

from .postgres_server import PostgresServer, find_binaries

# CI runs the same examples every time (no flaky discoveries, no timing deadlines);
# local runs explore new ones.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")

BACKENDS = ["memory", "sqlite", "postgresql"]

_schemas = itertools.count(1)


class PostgresUnavailable(Exception):
    pass


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | str]:
    """A private server (or the URL in SLUICE_TEST_POSTGRES_URL) for the whole run.

    Unreachable PostgreSQL skips the test locally and fails it in CI.
    """
    external = os.environ.get("SLUICE_TEST_POSTGRES_URL")
    if external:
        yield external
        return
    server: PostgresServer | None = None
    try:
        bindir = find_binaries()
        if bindir is None:
            raise PostgresUnavailable("no PostgreSQL binaries (initdb) are installed")
        server = PostgresServer(bindir)
    except Exception as exc:
        message = f"PostgreSQL is unavailable: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield server
    finally:
        server.destroy()


def postgres_base_url(server: PostgresServer | str) -> str:
    return server if isinstance(server, str) else server.url


def fresh_postgres_url(server: PostgresServer | str) -> str:
    """A URL whose schema nobody has used yet in this run."""
    base = postgres_base_url(server)
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}schema=t{os.getpid()}_{next(_schemas)}"


def drop_schema(url: str) -> None:
    import psycopg

    base, _, query = url.partition("?")
    schema = dict(p.split("=", 1) for p in query.split("&"))["schema"]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def url_for(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "memory":
        return "memory://"
    if backend == "postgresql":
        url = fresh_postgres_url(request.getfixturevalue("postgres_server"))
        request.addfinalizer(lambda: drop_schema(url))
        return url
    return f"sqlite:///{tmp_path / 'queues.db'}"


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh, empty database on each backend."""
    return url_for(request.param, tmp_path, request)


@pytest.fixture
def db(backend_url: str) -> Iterator[sluice.Database]:
    database = sluice.connect(backend_url)  # the defaults: FULL, group commit
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def q(db: sluice.Database) -> sluice.Queue:
    return db.create_queue("orders")


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database that several processes can share: a SQLite file, or PostgreSQL."""
    return url_for(request.param, tmp_path, request)
