"""Fixtures of the PostgreSQL-only tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import current_postgres_url, drop_schema
from tests.postgres_server import PostgresServer


@pytest.fixture
def url(postgres_server: PostgresServer | str) -> Iterator[str]:
    """A sluice URL of a new schema at this code's version, dropped after the test."""
    found = current_postgres_url(postgres_server)
    yield found
    drop_schema(found)
