"""The console sampler's pace (sluice.server.console.samples.pause): a slow sample (a
backlog of millions to count) stretches the pause after it, so that sampling never takes
more than its DUTY of the time, nor of the database's one SQLite connection."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from sluice.server.console.samples import DUTY, pause


def test_a_quick_sample_keeps_the_pace() -> None:
    assert pause(2.0, 0.001) == 2.0


def test_a_slow_sample_stretches_the_pause_to_the_duty() -> None:
    took = 0.5
    waited = pause(2.0, took)
    assert waited == pytest.approx(took / DUTY)
    assert took / (took + waited) <= DUTY


def test_a_duty_of_one_never_stretches_beyond_the_sample_itself() -> None:
    assert pause(0.05, 0.2, duty=1.0) == 0.2
    assert pause(0.05, 0.01, duty=1.0) == 0.05
