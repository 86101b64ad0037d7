"""The test Django project, set up once per test process, and a fresh sluice store per test.

Django's settings are configured once per process, so the project has both databases
from the start: 'default' (SQLite) and, where PostgreSQL is reachable, 'postgres' (a
database made for this run and dropped after it). Each test gets new sluice stores
(a new SQLite file; a new schema in the PostgreSQL database) by overriding TASKS, which
rebuilds the task backends.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import postgres_base_url, unavailable

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "tests.contrib.django_project.settings"
_schemas = itertools.count()


@dataclass
class DjangoProject:
    """The configured project: its databases, and the environment a subprocess needs."""

    root: Path
    env: dict[str, str]
    postgres: str | None
    """The PostgreSQL database's URL, or None (not reachable here)."""


@dataclass
class Stores:
    """This test's sluice stores, and the environment that gives them to a subprocess."""

    project: DjangoProject
    sluice_url: str
    schema: str | None
    env: dict[str, str] = field(default_factory=dict)


def _postgres(request: pytest.FixtureRequest) -> str | None:
    try:
        server = request.getfixturevalue("postgres_server")
    except pytest.skip.Exception:  # not reachable locally: the PostgreSQL tests skip
        return None
    import psycopg

    base = postgres_base_url(server)
    name = f"sluice_django_{os.getpid()}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{base.partition('?')[0].rsplit('/', 1)[0]}/{name}"


def _drop(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def django_project(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[DjangoProject]:
    try:
        import django
    except ImportError:
        unavailable("Django is not installed (the 'django' extra)")
    from django.conf import settings

    if settings.configured:
        raise RuntimeError("Django was set up by something else in this test process")
    root = tmp_path_factory.mktemp("django")
    postgres = _postgres(request)
    env = {
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "SLUICE_DJANGO_SQLITE": str(root / "django.sqlite3"),
        "SLUICE_DJANGO_SLUICE": f"sqlite:///{root / 'sluice.db'}",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
    }
    if postgres is not None:
        env["SLUICE_DJANGO_POSTGRES"] = postgres
        env["SLUICE_DJANGO_SCHEMA"] = "sluice"
    # Read by the settings module once, at setup; then the environment is as it was, so no
    # later test's subprocess (a Celery worker would set Django up) inherits the project.
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        django.setup()
    finally:
        for key, value in saved.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value
    from django.core.management import call_command
    from django.db import connections

    for alias in connections:
        call_command("migrate", run_syncdb=True, database=alias, verbosity=0)
    try:
        yield DjangoProject(root, env, postgres)
    finally:
        from sluice.contrib.django import close_databases

        close_databases()
        connections.close_all()
        if postgres is not None:
            _drop(postgres)


@pytest.fixture
def stores(django_project: DjangoProject, tmp_path: Path) -> Iterator[Stores]:
    """New sluice stores for this test, in TASKS for this process and in ``env``."""
    from django.test import override_settings

    from sluice.contrib.django import close_databases
    from tests.contrib.django_project import settings as project_settings
    from tests.contrib.django_project.tasksapp import tasks

    sluice_url = f"sqlite:///{tmp_path / 'sluice.db'}"
    schema = None
    if django_project.postgres is not None:
        import psycopg

        from sluice.backends.postgres_schema import create_current

        schema = f"django_{os.getpid()}_{next(_schemas)}"
        with psycopg.connect(django_project.postgres, autocommit=True) as conn:
            create_current(conn, schema)
    env = dict(os.environ)
    env.update(django_project.env)
    env["SLUICE_DJANGO_SLUICE"] = sluice_url
    if schema is not None:
        env["SLUICE_DJANGO_SCHEMA"] = schema
    tasks.RAN.clear()
    tasks.GATE.clear()
    tasks.ENTERED.clear()
    try:
        with override_settings(TASKS=project_settings.tasks(sluice_url, schema)):
            yield Stores(django_project, sluice_url, schema, env)
    finally:
        tasks.GATE.set()  # a worker thread a failed test left waiting
        close_databases()
        if schema is not None:
            import psycopg

            assert django_project.postgres is not None
            with psycopg.connect(django_project.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["default", "postgres"], ids=["sqlite", "postgresql"])
def alias(request: pytest.FixtureRequest, stores: Stores) -> str:
    """The TASKS alias under test: sluice on SQLite, or in Django's PostgreSQL database."""
    if request.param == "postgres" and stores.project.postgres is None:
        unavailable("PostgreSQL is unavailable")
    return str(request.param)
