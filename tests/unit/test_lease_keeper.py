"""The lease keeper's log: a failure's cause in full once, then one line a beat."""

from __future__ import annotations

import logging
import threading

import pytest

from sluice.engine.lease import LeaseKeeper
from sluice.errors import StorageError


def test_a_failing_heartbeat_logs_its_cause_once_and_its_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gone = StorageError('PostgreSQL failed: relation "s.sessions" does not exist')
    script: list[Exception | None] = [gone, gone, gone, None, StorageError("disk full")]
    done = threading.Event()

    def tick() -> None:
        if not script:
            done.set()  # every beat after the script succeeds
            return
        outcome = script.pop(0)
        if outcome is not None:
            raise outcome

    keeper = LeaseKeeper(tick, lease=0.003)  # a beat every millisecond
    with caplog.at_level(logging.WARNING, logger="sluice.lease"):
        keeper.start()
        assert done.wait(10)
        keeper.stop()
    got = [(r.levelname, r.getMessage().split(";")[0], r.exc_info is not None)
           for r in caplog.records]  # fmt: skip
    assert got == [
        ("ERROR", "sluice heartbeat failed", True),
        ("ERROR", "sluice heartbeat failed again (2 beats in a row), as above: "
                  'StorageError: PostgreSQL failed: relation "s.sessions" does not exist', False),
        ("ERROR", "sluice heartbeat failed again (3 beats in a row), as above: "
                  'StorageError: PostgreSQL failed: relation "s.sessions" does not exist', False),
        ("WARNING", "sluice heartbeat recovered after 3 failed beats", False),
        ("ERROR", "sluice heartbeat failed", True),
        ("WARNING", "sluice heartbeat recovered after 1 failed beats", False),
    ]  # fmt: skip
