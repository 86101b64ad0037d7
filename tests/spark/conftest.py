"""What the Spark rules tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice


@pytest.fixture
def two(shared_url: str, tmp_path: Path) -> Iterator[tuple[sluice.Database, sluice.Database]]:
    """A database for the local engine and a fresh one beside it for Spark."""
    local = sluice.connect(f"sqlite:///{tmp_path / 'local.db'}")
    remote = sluice.connect(shared_url)
    yield local, remote
    remote.close()
    local.close()
