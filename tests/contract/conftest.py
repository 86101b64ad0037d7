"""Fixtures shared by the contract suites (tests/conftest.py gives ``db`` on every
backend). A module that needs its clock elsewhere defines its own ``clock``."""

from __future__ import annotations

import pytest

import sluice
from sluice import ManualClock

T0 = 1_800_000_000.0
"""When a test's manual clock starts: 2027-01-15 08:00 UTC, a Friday."""


@pytest.fixture
def clock(db: sluice.Database) -> ManualClock:
    """The database's clock, a manual one at T0 that only the test moves."""
    db.clock = clock = ManualClock(T0)
    return clock
