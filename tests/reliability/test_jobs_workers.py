"""Workers in several processes: global limits, crashes, schedules and shutdown, for real."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

import sluice
from sluice.jobs import ManualClock
from sluice.jobs.profiles import Profile
from sluice.jobs.worker import ADAPTIVE_MAX

CHILD = Path(__file__).with_name("jobs_child.py")
T0 = datetime(2027, 1, 5, 10, 0, tzinfo=UTC).timestamp()

pytestmark = pytest.mark.slow


@contextmanager
def _children(url: str, *modes: tuple[str, ...]) -> Iterator[list[subprocess.Popen[str]]]:
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD), url, *mode], stdout=subprocess.PIPE, text=True
        )
        for mode in modes
    ]
    try:
        yield children
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait()
            assert child.stdout is not None
            child.stdout.close()


def _read(child: subprocess.Popen[str]) -> dict[str, object]:
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"the worker process ended early (exit code {child.wait()})"
    event = json.loads(line)
    assert isinstance(event, dict)
    return event


def _define(url: str) -> sluice.Database:
    db = sluice.connect(url)
    db.create_queue("sent", exist_ok=True)
    for name in ("mail", "hangs", "slow", "logged"):
        db.jobs.define(name, max_attempts=3, backoff=0.0)
    return db


def test_three_workers_together_stay_within_the_hourly_limit(shared_url: str) -> None:
    with _define(shared_url) as db:
        clock = ManualClock(T0)
        db.jobs.clock = clock
        db.jobs.set_profile(Profile("mail", default_per_hour=25))
        job = db.jobs.submit("mailing", [("mail", n) for n in range(200)])
        modes = [("limited", str(T0 + 60))] * 3
        with _children(shared_url, *modes) as children:
            ran = [_read(child)["ran"] for child in children]
        clock.set(T0 + 60)  # one time for all: what the workers enqueued is due by theirs
        assert sum(ran) == 25  # type: ignore[arg-type]
        assert db.jobs.get(job).succeeded == 25
        assert len(db.queue("sent").browse(limit=1000)) == 25
        assert db.jobs.usage("mail", T0 - 3600) == [("hour", T0, 25)]


def test_a_worker_killed_mid_task_loses_nothing_and_commits_once(shared_url: str) -> None:
    with _define(shared_url) as db:
        job = db.jobs.submit("j", [("hangs", "only")])
        with _children(shared_url, ("hang",)) as (child,):
            started = _read(child)
            assert started["event"] == "started"
            # The task is held by the child: nobody else can take it.
            assert db.jobs.get(job).running == 1
            child.send_signal(signal.SIGKILL)
            child.wait()
        assert db.queue("sent").browse() == []  # its uncommitted work never showed
        with _children(shared_url, ("finish",)) as (finisher,):
            assert _read(finisher)["ran"] == 1
        status = db.jobs.get(job, tasks=True)
        assert (status.status, status.succeeded) == ("done", 1)
        assert status.tasks[0].attempts == 2  # the killed run counted
        assert [m.body for m in db.queue("sent").browse()] == ["only"]


def test_a_worker_killed_mid_batch_repeats_only_the_open_batch(
    shared_url: str, tmp_path: Path
) -> None:
    """At the default settings a worker settles quick tasks in batches: a kill -9 makes the
    runs of the open batch happen again (effects outside the database repeat), while each
    task's own work commits once, and the killed runs count."""
    log = tmp_path / "runs.log"
    with _define(shared_url) as db:
        job = db.jobs.submit("j", [("logged", n) for n in range(100)])
        with _children(shared_url, ("batch", str(log))) as (child,):
            assert _read(child)["event"] == "started"  # the run of 40 hangs, within a batch
            child.send_signal(signal.SIGKILL)
            child.wait()
        committed = sorted(m.body for m in db.queue("sent").browse(limit=1000))
        # Batches in order of submission, the open one (with 40) never showed.
        assert committed == list(range(len(committed)))
        assert len(committed) <= 40
        with _children(shared_url, ("batch-finish", str(log))) as (finisher,):
            assert _read(finisher)["ran"] == 100 - len(committed)
        assert sorted(m.body for m in db.queue("sent").browse(limit=1000)) == list(range(100))
        runs = [int(line) for line in log.read_text().split()]
        # What ran twice: the open batch's runs up to 40, nothing else.
        assert sorted(n for n in set(runs) if runs.count(n) == 2) == list(range(len(committed), 41))
        assert all(runs.count(n) == 1 for n in range(100) if n < len(committed) or n > 40)
        status = db.jobs.get(job, tasks=True)
        assert (status.status, status.succeeded) == ("done", 100)
        # The killed batch's tasks count a run each (taken, whether they ran or not).
        again = [t.attempts for t in status.tasks].count(2)
        assert 41 - len(committed) <= again <= ADAPTIVE_MAX


def test_a_schedule_fires_once_per_due_time_across_workers(shared_url: str) -> None:
    with _define(shared_url) as db:
        clock = ManualClock(T0 - 1)
        db.jobs.clock = clock
        db.jobs.schedule("digest", "mail", "*/10 * * * *", body="digest")
        # 10:00, 10:10, ... 10:50 are due at 10:55: six due times.
        with _children(shared_url, *[("fire", str(T0 + 55 * 60))] * 3) as children:
            fired = [_read(child)["fired"] for child in children]
        clock.set(T0 + 55 * 60)  # one time for all: the tasks fired are due by the workers'
        assert sum(fired) == 6  # type: ignore[arg-type]
        assert db.queue("tasks.mail").stats()["ready"] == 6


def test_sigterm_lets_the_task_in_hand_finish(shared_url: str) -> None:
    with _define(shared_url) as db:
        db.jobs.submit_task("slow", 0.5)
        with _children(shared_url, ("serve", "30")) as (child,):
            assert _read(child)["event"] == "ready"
            assert _read(child)["event"] == "started"
            child.send_signal(signal.SIGTERM)
            stopped = _read(child)
            assert stopped == {"event": "stopped", "processed": 1}
            assert child.wait(timeout=60) == 0
        assert len(db.queue("sent").browse()) == 1
        assert db.queue("tasks.slow").stats()["claimed"] == 0


def test_shutdown_past_its_grace_releases_the_task(shared_url: str) -> None:
    with _define(shared_url) as db:
        task = db.jobs.submit_task("slow", 30.0)
        with _children(shared_url, ("serve", "0.2")) as (child,):
            assert _read(child)["event"] == "ready"
            assert _read(child)["event"] == "started"
            begun = time.monotonic()
            child.send_signal(signal.SIGTERM)
            assert _read(child) == {"event": "stopped", "processed": 0}
            assert child.wait(timeout=60) == 0
            assert time.monotonic() - begun < 20  # interrupted, not waited for
        (back,) = db.queue("tasks.slow").browse()
        assert back.id == task
        assert db.queue("sent").browse() == []
