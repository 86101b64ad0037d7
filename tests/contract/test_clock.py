"""One clock: message times, start times and lateness follow ``db.clock`` on every backend.

A ManualClock moves them all, so nothing here sleeps for the time it tests;
leases alone stay on real time.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

import sluice
from sluice.jobs import ManualClock, Task

PAST = datetime(2020, 3, 2, 10, 0, tzinfo=UTC).timestamp()  # before any test runs
FUTURE = datetime(2027, 1, 5, 10, 0, tzinfo=UTC).timestamp()
WEEK = 7 * 86400.0


@pytest.fixture(params=[PAST, FUTURE], ids=["past", "future"])
def clock(request: pytest.FixtureRequest, db: sluice.Database) -> ManualClock:
    clock = ManualClock(request.param)
    db.jobs.clock = clock
    return clock


def _mail(db: sluice.Database) -> list[object]:
    ran: list[object] = []

    @db.task("mail")
    def mail(task: Task) -> None:
        ran.append(task.body)

    return ran


def test_the_jobs_clock_is_the_databases_clock(backend_url: str) -> None:
    first = ManualClock(FUTURE)
    with sluice.connect(backend_url, clock=first) as db:
        assert db.clock is first
        assert db.jobs.clock is first
        second = ManualClock(PAST)
        db.jobs.clock = second
        assert db.clock is second
        assert db.backend.clock is second


def test_a_task_starts_when_the_jobs_clock_passes_its_start_time(
    db: sluice.Database, clock: ManualClock
) -> None:
    ran = _mail(db)
    start = clock.now()
    db.jobs.submit_task("mail", "later", start_at=start + 600)
    worker = db.worker()
    assert worker.run_until_idle() == 0
    clock.advance(599)
    assert worker.run_until_idle() == 0
    clock.advance(1)
    assert worker.run_until_idle() == 1
    assert ran == ["later"]


def test_a_late_job_takes_turns_with_an_on_time_one(
    db: sluice.Database, clock: ManualClock
) -> None:
    ran = _mail(db)
    now = clock.now()
    db.jobs.submit("late", [("mail", f"L{i}") for i in range(4)], deadline=now - 100)
    db.jobs.submit("on time", [("mail", f"C{i}") for i in range(4)], deadline=now + 3600)
    db.worker().run_until_idle(max_tasks=4)
    assert [str(body)[0] for body in ran].count("C") == 2


def test_delay_and_ttl_follow_the_clock(db: sluice.Database, clock: ManualClock) -> None:
    q = db.create_queue("orders")
    start = clock.now()
    q.put("delayed", delay=60)
    q.put("short-lived", ttl=30)
    (waiting,) = q.browse(state="delayed")
    assert (waiting.enqueued, waiting.available) == (start, start + 60)
    clock.advance(31)  # the ttl is over, the delay not yet
    assert q.get() is None
    assert q.stats() == {
        "ready": 0, "delayed": 1, "pending": 0, "claimed": 0, "expired": 1, "failed": 0,
        "done": 0,
    }  # fmt: skip
    clock.advance(29)
    message = q.get()
    assert message is not None
    assert message.body == "delayed"
    message.ack()
    assert q.purge("expired", older_than=120) == 0  # enqueued 60 s ago by the clock
    clock.advance(60)
    assert q.purge("expired", older_than=120) == 1


def test_a_waiting_consumer_wakes_when_the_clock_reaches_a_delayed_message(
    db: sluice.Database, clock: ManualClock
) -> None:
    q = db.create_queue("orders")
    q.put("tomorrow", delay=86400)
    mover = threading.Timer(0.2, clock.advance, (86400,))
    begun = time.monotonic()
    mover.start()
    try:
        message = q.get(wait=30)
    finally:
        mover.cancel()
    assert message is not None
    assert message.body == "tomorrow"
    message.ack()
    assert time.monotonic() - begun < 10  # polled for by the clock, not slept a day


def test_moving_the_clock_a_week_rolls_back_no_live_session(shared_url: str) -> None:
    clock = ManualClock(time.time())
    with (
        sluice.connect(shared_url) as holder,
        sluice.connect(shared_url, clock=clock) as mover,
    ):
        holder.create_queue("orders").put("held")
        tx = holder.begin()
        assert len(tx.dequeue("orders")) == 1
        clock.advance(WEEK)
        assert mover.recover() == []
        assert mover.queue("orders").stats()["claimed"] == 1
        tx.commit()  # its lease is intact: no LeaseLost
        assert holder.queue("orders").stats()["ready"] == 0
