"""Fixtures shared by all tests: a Database on every backend."""

from __future__ import annotations

import contextlib
import itertools
import os
import typing
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import settings

import sluice

from .pgbouncer import PgBouncer
from .postgres_server import PostgresServer, find_binaries

T = typing.TypeVar("T")

# CI runs the same examples every time (no flaky discoveries, no timing deadlines);
# local runs explore new ones.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")

# Spark's JVMs (this run's session and the drivers that tests start as processes) live
# for seconds, not hours: the quick compiler alone and one GC thread halve their CPU,
# which several test processes on two cores share.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

BACKENDS = ["memory", "sqlite", "postgresql"]

POOLED_MODULES = frozenset(
    {
        "tests.contract.test_messages",
        "tests.contract.test_transactions",
        "tests.contract.test_delivery",
        "tests.contract.test_failed",
        "tests.contract.test_pause",
        "tests.contract.test_purge",
        "tests.contract.test_jobs",
        "tests.contract.test_get_many",
    }
)
"""The contract modules that also run through PgBouncer in transaction mode (backend
"pgbouncer"): the queue's core and jobs, 121 s of test time of the whole suite's 506 s
through PgBouncer (which passes too: SLUICE_TEST_POOLED_ALL=1), what `make test` can
afford; tests/postgresql/test_pooler.py has the pooler's own tests."""


def _deselect_unpooled(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The "pgbouncer" backend only for POOLED_MODULES (SLUICE_TEST_POOLED_ALL=1: everywhere)."""
    if os.environ.get("SLUICE_TEST_POOLED_ALL") == "1":
        return
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        pooled = callspec is not None and callspec.params.get("backend_url") == "pgbouncer"
        module = getattr(item, "module", None)
        if pooled and getattr(module, "__name__", "") not in POOLED_MODULES:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules with slow tests spread evenly through the collection.

    ``make test`` runs the tests in parallel with pytest-xdist's ``worksteal``, which hands
    each worker one contiguous share of the collection and lets an idle worker take the
    second half of a busy one's queue. Put first in the collection, the slow tests (Spark's
    minute-long ones above all) all fell to the first worker, and the others took them
    over one by one as they ran out: the run ended on four JVMs at once. Spread evenly,
    every share holds a like part of them, between quick tests. A module's tests stay
    together: its module-scoped fixtures (Spark's vector answers, a built wheel) are made
    once per worker, not again after every test of another module.
    """
    _deselect_unpooled(config, items)
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(_SPARK_WORKER_START)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = spread_slow(items, workers, _is_slow, lambda item: item.path)


# Spark gives a Python worker it starts 10 s to connect back, a wait no setting changes
# (PythonWorkerFactory.createSimpleWorker, SPARK-45245): on two cores at a load average of
# 10 in the full run, a streaming source's worker once took longer, and the query failed
# in INITIALIZING before sluice's code ran. That failure alone runs the test once more;
# any other still fails it at once.
_SPARK_WORKER_START = pytest.mark.flaky(
    reruns=1, only_rerun=["Python worker failed to connect back"]
)


def spread_slow(
    items: list[T],
    workers: int,
    slow: typing.Callable[[T], bool],
    module: typing.Callable[[T], object],
) -> list[T]:
    """``items`` by modules, those with a slow test at even spaces among the others."""
    groups: dict[object, list[T]] = {}
    for item in items:
        groups.setdefault(module(item), []).append(item)
    found = [g for g in groups.values() if any(slow(item) for item in g)]
    # Every workers-th slow module in turn: neighbours (tests/spark's) go to different shares.
    heavy = [found[i] for start in range(workers) for i in range(start, len(found), workers)]
    # A quick module as large as a good part of a share (test_vectors.py's 1,449 tests)
    # goes in parts, so that the spacing stays even.
    light = [
        g[n : n + 200]
        for g in groups.values()
        if not any(slow(item) for item in g)
        for n in range(0, len(g), 200)
    ]
    quick = sum(len(g) for g in light)
    ordered: list[T] = []
    placed = 0
    for n, group in enumerate(heavy):
        due = (n + 0.5) * quick / len(heavy)  # quick tests before the n-th slow module
        while light and placed + len(light[0]) / 2 <= due:
            placed += len(light[0])
            ordered += light.pop(0)
        ordered += group
    for group in light:
        ordered += group
    return ordered


def _is_slow(item: pytest.Item) -> bool:
    """Marked slow, or on Spark, or running the docs' examples (spark.md's among them)."""
    if item.get_closest_marker("slow") is not None:
        return True
    return "spark" in getattr(item, "fixturenames", ()) or item.path.parent.name in {
        "spark",
        "docs",
    }


_schemas = itertools.count(1)


class PostgresUnavailable(Exception):
    pass


def unavailable(message: str) -> typing.NoReturn:
    """What this machine lacks (a server, a binary, a package) skips the test here and
    fails it in CI, where the project's own files must have provided it."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


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
        unavailable(f"PostgreSQL is unavailable: {exc}")
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def own_postgres_server() -> Iterator[PostgresServer]:
    """A cluster of this test's own, for a test that stops or restarts its server: the
    run's shared server serves the other workers' tests meanwhile, and a restart would cut
    their connections too."""
    bindir = find_binaries()
    if bindir is None:
        unavailable("PostgreSQL is unavailable: no PostgreSQL binaries (initdb) are installed")
    with PostgresServer(bindir) as server:
        yield server


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: PostgresServer | str) -> Iterator[PgBouncer]:
    """A private PgBouncer in transaction mode, 4 server connections per database and
    user, in front of the tests' PostgreSQL, for the whole run.

    No pgbouncer binary skips the test locally and fails it in CI.
    """
    try:
        bouncer = PgBouncer(postgres_base_url(postgres_server))
    except Exception as exc:
        unavailable(f"PgBouncer is unavailable: {exc}")
    try:
        yield bouncer
    finally:
        bouncer.stop()


def pooled_url(bouncer: PgBouncer, url: str) -> str:
    """``url`` (a sluice URL on the tests' PostgreSQL) through ``bouncer``: declared as
    pooled, with the server's own URL as ``direct``."""
    base, _, query = url.partition("?")
    direct = quote(base, safe="")
    return f"{bouncer.url_for(base)}?{query}&pooler=transaction&direct={direct}"


def postgres_base_url(server: PostgresServer | str) -> str:
    return server if isinstance(server, str) else server.url


def fresh_postgres_url(server: PostgresServer | str) -> str:
    """A URL whose schema nobody has used yet in this run: sluice migrates it from zero."""
    base = postgres_base_url(server)
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}schema=t{os.getpid()}_{next(_schemas)}"


def current_postgres_url(server: PostgresServer | str) -> str:
    """A URL of a new schema already at this code's version, so connecting migrates nothing.

    Made from schema.sql, which is what migrating from zero gives: the migrations
    run from zero in tests/postgresql/test_schema.py, which proves it.
    """
    import psycopg

    from sluice.backends.postgres_schema import create_current

    url = fresh_postgres_url(server)
    with psycopg.connect(postgres_base_url(server), autocommit=True) as conn:
        create_current(conn, schema_of(url))
    return url


def schema_of(url: str) -> str:
    return dict(p.split("=", 1) for p in url.partition("?")[2].split("&"))["schema"]


def drop_schema(url: str) -> None:
    import psycopg

    with psycopg.connect(url.partition("?")[0], autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema_of(url)}" CASCADE')


def url_for(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "memory":
        return "memory://"
    if backend == "pgbouncer":
        url = current_postgres_url(request.getfixturevalue("postgres_server"))
        request.addfinalizer(lambda: drop_schema(url))
        return pooled_url(request.getfixturevalue("pgbouncer"), url)
    if backend == "postgresql":
        url = current_postgres_url(request.getfixturevalue("postgres_server"))
        request.addfinalizer(lambda: drop_schema(url))
        return url
    return f"sqlite:///{tmp_path / 'queues.db'}"


@pytest.fixture(params=[*BACKENDS, "pgbouncer"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh, empty database on each backend."""
    return url_for(request.param, tmp_path, request)


@pytest.fixture
def api() -> str:
    """The API the ``db`` fixture gives: a module imports ``both_apis`` for sluice.aio too."""
    return "sync"


@pytest.fixture
def db(backend_url: str, api: str) -> Iterator[sluice.Database]:
    if api == "aio":  # the blocking API's shape over sluice.aio (tests/contract/aio_facade.py)
        from .contract.aio_facade import blocking_facade

        with blocking_facade(backend_url) as facade:
            yield typing.cast(sluice.Database, facade)
        return
    database = sluice.connect(backend_url)  # the defaults: FULL, group commit
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def q(db: sluice.Database) -> sluice.Queue:
    return db.create_queue("orders")


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database that several processes can share: a SQLite file, or PostgreSQL."""
    yield url_for(request.param, tmp_path, request)
    # Before the schema is dropped (url_for's finalizer runs after this): the Databases
    # a pipeline opened in this process go now, not at exit against a schema, or a
    # server, long gone.
    _close_spark_connections()


def _close_spark_connections() -> None:
    import sys

    options = sys.modules.get("sluice.spark.options")
    if options is not None:
        options.close_connections()


if typing.TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    """One local SparkSession for every Spark test, stopped at the end of the run.

    Without pyspark or Java the test is skipped locally and fails in CI.
    """
    import shutil
    import sys

    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        unavailable(f"pyspark is unavailable: {exc}")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        unavailable("Spark needs Java, and there is none (no java on PATH, no JAVA_HOME)")
    # PostgreSQL first, when there is one: session fixtures stop in reverse order, so
    # Spark's workers close their connections before the server goes.
    with contextlib.suppress(pytest.skip.Exception):
        request.getfixturevalue("postgres_server")
    # Workers must run this interpreter; a loopback address avoids slow host lookups.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        session = (
            SparkSession.builder.master("local[2]")
            .appName("sluice-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "1")
            .config("spark.default.parallelism", "2")
            .getOrCreate()
        )
    except Exception as exc:  # the JVM did not start: Java missing or broken
        unavailable(f"Spark did not start: {exc}")
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        _close_spark_connections()
        session.stop()
