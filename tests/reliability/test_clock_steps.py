"""The wall clock stepped under sluice (an NTP step, an operator's ``date``). Back: messages
put with no delay stay deliverable at once, in live processes and in ones started after the
step (sluice.clock). Forward, further than the lease: no live session is taken for dead
(sluice.engine.lease). The steps are real to the processes: libfaketime moves their wall
clock and, as NTP does, not their monotonic one."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import sluice
from sluice.clock import STEP_BACK_HELD, ManualClock

from .campaign import CLOCKED, ROOT, stepped_clock

CHILD = [*CLOCKED, "tests.reliability.clock_child"]
"""clock_child.py through campaign_clock: its time.sleep (sluice's included) works under
libfaketime."""

pytestmark = pytest.mark.slow


class Process:
    """A clock_child.py process and its commands."""

    def __init__(self, popen: subprocess.Popen[str]) -> None:
        self.popen = popen
        assert self.read() == "ready"

    def read(self) -> object:
        assert self.popen.stdout is not None
        return json.loads(self.popen.stdout.readline())

    def ask(self, command: str) -> object:
        assert self.popen.stdin is not None
        self.popen.stdin.write(command + "\n")
        self.popen.stdin.flush()
        return self.read()


@pytest.fixture
def clock_file(tmp_path: Path) -> Path:
    path = tmp_path / "clock"
    path.write_text("+0\n")
    return path


@contextmanager
def process(url: str, clock_file: Path) -> Iterator[Process]:
    env = os.environ | stepped_clock(clock_file)
    with subprocess.Popen(
        [*CHILD, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        cwd=ROOT,
    ) as popen:  # fmt: skip
        try:
            yield Process(popen)
        finally:
            assert popen.stdin is not None
            popen.stdin.close()
            popen.wait(30)


def test_a_live_process_holds_still_through_a_step_back(tmp_path: Path, clock_file: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    clock_file.write_text("+60\n")
    with process(url, clock_file) as child:
        child.ask("put early")
        ahead = child.ask("now")
        assert isinstance(ahead, float)
        assert ahead > time.time() + 50
        clock_file.write_text("+0\n")  # the clock steps back a minute
        child.ask("put late")
        held = child.ask("now")
        assert isinstance(held, float)
        assert held >= ahead
        assert child.ask("take") == "early"  # not "due in a minute"
        assert child.ask("take") == "late"  # and in the order put


def test_a_process_started_after_the_step_back_takes_what_was_put_before(
    tmp_path: Path, clock_file: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    clock_file.write_text("+60\n")
    with process(url, clock_file) as before:
        before.ask("put early")
    clock_file.write_text("+0\n")
    with process(url, clock_file) as after:
        assert after.ask("take") == "early"


def test_stamps_further_ahead_than_a_clock_step_are_a_test_clocks_and_not_waited_for(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    ahead = time.time() + STEP_BACK_HELD * 2
    with sluice.connect(url, clock=ManualClock(ahead)) as db:
        db.create_queue("q").put("from the future")
    with sluice.connect(url) as db:
        assert db.clock.now() < ahead - STEP_BACK_HELD  # the wall clock's time, not held
        assert db.queue("q").stats()["delayed"] == 1


def test_a_step_forward_past_the_lease_rolls_back_no_live_session(
    tmp_path: Path, clock_file: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}?lease=2"
    with process(url, clock_file) as holder:
        holder.ask("put first")
        assert holder.ask("hold") == "first"
        clock_file.write_text("+60\n")  # every heartbeat stamped before is a minute old
        # A process started after the step recovers dead sessions as it connects.
        with process(url, clock_file) as newcomer:
            assert newcomer.ask("take") is None  # still the holder's
        assert holder.ask("commit") == "committed"
