"""bench pgbench-cycle's window: a client whose queue runs dry ends it for all, and the
rate is what all delivered by then over the time until then."""

from __future__ import annotations

import threading
import time

import pytest

from bench.postgres import pgbench_cycle
from bench.postgres.pgbench_cycle import _Dry, _timed


def test_a_dry_queue_ends_the_window_and_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgbench_cycle, "NOTES", [])
    busy = threading.Event()

    def drain(c: int, taken: list[int], stop: threading.Event) -> None:
        if c == 0:
            busy.wait()  # the other client is delivering when this queue runs dry
            taken[c] = 5
            raise _Dry(c)
        while not stop.is_set():
            taken[c] += 1
            busy.set()

    start = time.perf_counter()
    rate = _timed("peer", 2, 600.0, drain)
    assert time.perf_counter() - start < 60  # ended by the dry queue, not by the 600 s
    assert rate > 0
    (note,) = pgbench_cycle.NOTES
    assert note.startswith("peer at 2 clients: q0 ran dry after ")
    assert note.endswith(" s of 600; its rate is over that window")


def test_another_error_of_a_client_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgbench_cycle, "NOTES", [])

    def drain(c: int, taken: list[int], stop: threading.Event) -> None:
        if c == 1:
            raise ValueError("the server went away")
        stop.wait()

    with pytest.raises(RuntimeError, match="peer: the server went away"):
        _timed("peer", 2, 600.0, drain)
    assert pgbench_cycle.NOTES == []
