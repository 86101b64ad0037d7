"""Fixtures shared by all tests: a Database on every backend."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import sluice

# CI runs the same examples every time (no flaky discoveries, no timing deadlines);
# local runs explore new ones.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")

BACKENDS = ["memory", "sqlite"]


def url_for(backend: str, tmp_path: Path) -> str:
    if backend == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'queues.db'}"


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh, empty database on each backend."""
    return url_for(request.param, tmp_path)


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
