"""A failed gateway thread's pauses before it runs again (sluice.gateways.manager)."""

from __future__ import annotations

from sluice.gateways.manager import Restarts


def test_pauses_double_while_runs_fail_at_once_up_to_the_most() -> None:
    restarts = Restarts(0.5, 4.0)
    assert [restarts.pause(ran=0.01) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_run_longer_than_the_pause_before_it_starts_again_from_the_first() -> None:
    restarts = Restarts(0.5, 30.0)
    assert [restarts.pause(ran=0.01) for _ in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert restarts.pause(ran=10.0) == 0.5  # it worked for a while: a new fault
    assert restarts.pause(ran=0.2) == 1.0
    assert restarts.pause(ran=0.9) == 2.0  # not longer than the pause before it (1 s)
    assert restarts.pause(ran=2.5) == 0.5
