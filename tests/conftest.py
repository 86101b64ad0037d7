"""Fixtures shared by all tests: a Database on every backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice

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
