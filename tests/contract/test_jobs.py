"""Jobs, tasks, profiles and workers: the same behaviour on every backend.

Time is a ManualClock the tests move; workers run in the test's thread
(``run_until_idle``) unless a test is about threads.
"""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

import sluice
from sluice.jobs import ManualClock, Task, TaskSpec
from sluice.jobs.profiles import Entry, Follow, Profile
from sluice.jobs.worker import ADAPTIVE_BUDGET, ADAPTIVE_MAX, adapted_size

# Tuesday 2027-01-05 10:00 UTC.
T0 = datetime(2027, 1, 5, 10, 0, tzinfo=UTC).timestamp()


@pytest.fixture
def clock(db: sluice.Database) -> ManualClock:
    clock = ManualClock(T0)
    db.jobs.clock = clock
    return clock


@pytest.fixture
def ran(db: sluice.Database, clock: ManualClock) -> list[object]:
    """Bodies of the mail tasks run, in order; a body "boom" raises, "bounce" fails logically."""
    bodies: list[object] = []

    @db.task("mail", max_attempts=3, backoff=0.0)
    def mail(task: Task) -> None:
        if task.body == "boom":
            raise RuntimeError("smtp refused")
        if task.body == "bounce":
            task.fail("mailbox unknown")
            return
        bodies.append(task.body)

    return bodies


def test_a_job_runs_to_done_and_its_alert_names_every_task(
    db: sluice.Database, clock: ManualClock, ran: list[object]
) -> None:
    db.create_queue("alerts")
    ended: list[sluice.jobs.JobStatus] = []
    db.jobs.on_complete(ended.append)
    job = db.jobs.submit(
        "weekly report", [("mail", "a"), ("mail", "b"), ("mail", "bounce")],
        owner="ops", info={"week": 1}, alert_queue="alerts", job_type="report",
    )  # fmt: skip
    status = db.jobs.get(job)
    assert (status.status, status.total, status.waiting, status.progress) == ("pending", 3, 3, 0)
    assert (status.owner, status.info, status.job_type) == ("ops", {"week": 1}, "report")

    assert db.worker().run_until_idle() == 3
    assert ran == ["a", "b"]
    status = db.jobs.get(job, tasks=True)
    assert (status.status, status.succeeded, status.failed, status.progress) == ("failed", 2, 1, 1)
    assert status.started_at == status.ended_at == T0
    assert [(t.success, t.note) for t in status.tasks] == [
        (True, None),
        (True, None),
        (False, "mailbox unknown"),
    ]
    alert = db.queue("alerts").get()
    assert alert is not None
    alert.ack()
    body = alert.body
    assert isinstance(body, dict)
    assert body["job"] == job
    assert body["status"] == "failed"
    assert len(body["succeeded"]) == 2
    assert body["failed"][0]["note"] == "mailbox unknown"
    assert [s.id for s in ended] == [job]
    assert db.jobs.send_alerts() == 0  # once only
    assert db.queue("alerts").get() is None


def test_default_order_is_job_priority_deadline_then_task_priority_deadline(
    db: sluice.Database, clock: ManualClock, ran: list[object]
) -> None:
    db.jobs.submit("low", [("mail", "low")], priority=0)
    db.jobs.submit("late deadline", [("mail", "hi-late")], priority=5, deadline=T0 + 900)
    db.jobs.submit(
        "early deadline",
        [
            TaskSpec("mail", "hi-early-p0-d2", deadline=T0 + 200),
            TaskSpec("mail", "hi-early-p0-d1", deadline=T0 + 100),
            TaskSpec("mail", "hi-early-p1", priority=1),
        ],
        priority=5,
        deadline=T0 + 600,
    )
    db.worker().run_until_idle()
    assert ran == ["hi-early-p1", "hi-early-p0-d1", "hi-early-p0-d2", "hi-late", "low"]


def test_late_jobs_take_turns_with_the_next_ones(
    db: sluice.Database, clock: ManualClock, ran: list[object]
) -> None:
    # A and B are late (by deadline order they would run first, one after the
    # other); C is on time. Late jobs alternate with the rest, round-robin.
    db.jobs.submit("A", [("mail", f"A{i}") for i in range(4)], deadline=T0 - 100)
    db.jobs.submit("B", [("mail", f"B{i}") for i in range(4)], deadline=T0 - 50)
    db.jobs.submit("C", [("mail", f"C{i}") for i in range(4)], deadline=T0 + 3600)
    worker = db.worker()
    worker.run_until_idle(max_tasks=8)
    firsts = [str(b)[0] for b in ran]
    assert firsts.count("C") == 4  # half of the turns go to the on-time work
    assert firsts.count("A") == 2
    assert firsts.count("B") == 2
    assert all(a != b for a, b in itertools.pairwise(firsts) if "C" in (a + b))
    worker.run_until_idle()
    assert sorted(map(str, ran)) == sorted(f"{j}{i}" for j in "ABC" for i in range(4))


def test_failed_runs_are_retried_then_the_task_fails_into_the_error_queue(
    db: sluice.Database, clock: ManualClock, ran: list[object]
) -> None:
    job = db.jobs.submit("j", [("mail", "boom"), ("mail", "ok")])
    db.worker().run_until_idle()
    status = db.jobs.get(job, tasks=True)
    assert (status.status, status.succeeded, status.failed) == ("failed", 1, 1)
    failed = next(t for t in status.tasks if not t.success)
    assert (failed.attempts, failed.note) == (3, "RuntimeError: smtp refused")
    (dead,) = db.queue("tasks.mail.failed").browse()
    assert (dead.body, dead.attempts) == ("boom", 3)


def test_a_failed_run_waits_its_backoff_and_keeps_the_error(db: sluice.Database) -> None:
    @db.task("flaky", max_attempts=5, backoff=30.0)
    def flaky(task: Task) -> None:
        raise OSError("connection reset")

    assert db.jobs.types.get("flaky").retry_delay(1) == 30.0
    assert db.jobs.types.get("flaky").retry_delay(3) == 120.0
    db.jobs.submit_task("flaky", {"n": 1})
    before = datetime.now(UTC)
    assert db.worker().run_until_idle() == 1  # one run, then it waits
    (waiting,) = db.queue("tasks.flaky").browse(state="delayed")
    assert waiting.attempts == 1
    assert waiting.error == "OSError: connection reset"
    assert 25 < (waiting.available_at - before).total_seconds() < 35


def test_what_a_task_enqueues_commits_with_it_or_not_at_all(
    db: sluice.Database, clock: ManualClock
) -> None:
    db.create_queue("sent")

    @db.task("send", max_attempts=1)
    def send(task: Task) -> None:
        task.enqueue("sent", {"to": task.body})
        if task.body == "x":
            raise RuntimeError("after enqueueing")

    job = db.jobs.submit("j", [("send", "ok"), ("send", "x")])
    db.worker().run_until_idle()
    assert [m.body for m in db.queue("sent").browse()] == [{"to": "ok"}]
    assert db.jobs.get(job).failed == 1


def test_follow_up_tasks_join_the_job(db: sluice.Database, clock: ManualClock) -> None:
    order: list[object] = []

    @db.task("step")
    def step(task: Task) -> None:
        order.append(task.body)
        if isinstance(task.body, int) and task.body < 3:
            task.submit("step", task.body + 1)

    job = db.jobs.submit("chain", [("step", 1)])
    db.worker().run_until_idle()
    assert order == [1, 2, 3]
    status = db.jobs.get(job)
    assert (status.status, status.total, status.succeeded) == ("done", 3, 3)


def test_a_task_past_its_timeout_is_interrupted_and_retried(
    db: sluice.Database, clock: ManualClock
) -> None:
    runs: list[int] = []

    @db.task("spin", max_attempts=2, backoff=0.0, timeout=0.2)
    def spin(task: Task) -> None:
        runs.append(task.attempts)
        if task.attempts == 0:
            while True:  # pure Python: the timeout interrupts it
                pass

    job = db.jobs.submit("j", [("spin", None)])
    db.worker().run_until_idle()
    assert runs == [0, 1]
    status = db.jobs.get(job, tasks=True)
    assert (status.status, status.tasks[0].attempts) == ("done", 2)


def test_profile_caps_starts_per_hour_and_per_cycle(
    db: sluice.Database, clock: ManualClock, ran: list[object]
) -> None:
    db.jobs.set_profile(
        Profile(
            "mail",
            entries=(Entry.parse("mon-fri", "08:00-18:00", tz="Europe/Berlin", max_per_hour=2),),
            default_per_hour=50,
            default_per_cycle=4,
            cycle=60.0,
        )
    )
    db.jobs.submit("j", [("mail", i) for i in range(20)])
    worker = db.worker()
    assert worker.run_until_idle() == 2  # Tuesday 11:00 in Berlin: working hours
    clock.advance(1800)
    assert worker.run_until_idle() == 0  # the same hour
    clock.advance(1800)
    assert worker.run_until_idle() == 2  # the next hour
    clock.set(datetime(2027, 1, 5, 19, 0, tzinfo=UTC).timestamp())  # 20:00 in Berlin
    assert worker.run_until_idle() == 4  # per cycle
    clock.advance(60)
    assert worker.run_until_idle() == 4
    usage = {(kind, used) for kind, _, used in db.jobs.usage("mail", T0)}
    assert ("hour", 2) in usage
    assert ("cycle", 4) in usage


def test_load_following_profile_slows_down_as_load_rises(
    db: sluice.Database, clock: ManualClock, ran: list[object]
) -> None:
    db.jobs.set_profile(
        Profile(
            "mail",
            entries=(
                Entry.parse("*", "*", max_per_hour=10, follow=Follow("web_rpm", capacity=1000)),
            ),
        )
    )
    db.jobs.submit("j", [("mail", i) for i in range(30)])
    worker = db.worker()
    db.jobs.report("web_rpm", 800)  # busy: 10 * (1 - 0.8) = 2 an hour
    assert worker.run_until_idle() == 2
    clock.advance(3600)
    db.jobs.report("web_rpm", 0)  # idle: the full 10
    worker.gate._metrics.clear()  # read the new value now, not after the cache's second
    assert worker.run_until_idle() == 10


def test_a_task_with_a_start_time_waits_for_it(db: sluice.Database, ran: list[object]) -> None:
    db.jobs.submit_task("mail", "later", start_at=T0 + 600)  # by the jobs clock
    assert db.worker().run_until_idle() == 0
    (waiting,) = db.queue("tasks.mail").browse(state="delayed")
    assert waiting.body == "later"


def test_schedules_fire_once_per_due_time(
    db: sluice.Database, clock: ManualClock, ran: list[object]
) -> None:
    clock.set(datetime(2027, 1, 5, 10, 7, tzinfo=UTC).timestamp())
    due = db.jobs.schedule("digest", "mail", "*/15 * * * *", body="digest")
    assert due == datetime(2027, 1, 5, 10, 15, tzinfo=UTC).timestamp()
    assert db.jobs.fire_schedules() == 0
    clock.set(datetime(2027, 1, 5, 10, 31, tzinfo=UTC).timestamp())
    assert db.jobs.fire_schedules() == 2  # 10:15 and 10:30
    assert db.jobs.fire_schedules() == 0
    assert db.worker().run_until_idle() == 2
    assert ran == ["digest", "digest"]
    assert (
        db.jobs.schedules()[0]["next_due"] == datetime(2027, 1, 5, 10, 45, tzinfo=UTC).timestamp()
    )


def test_retention_cleans_up_finished_jobs(
    db: sluice.Database, clock: ManualClock, ran: list[object]
) -> None:
    kept = db.jobs.submit("kept", [("mail", "a")], retention=3600)
    gone = db.jobs.submit("gone", [("mail", "b")], retention=0)
    db.worker().run_until_idle()  # runs the tasks, then upkeep: alerts, retention
    with pytest.raises(sluice.JobNotFound):
        db.jobs.get(gone)
    assert len(db.jobs.get(kept, tasks=True).tasks) == 1
    clock.advance(3601)
    db.jobs.maintain()
    with pytest.raises(sluice.JobNotFound):
        db.jobs.get(kept)


def test_job_info_and_listing(db: sluice.Database, clock: ManualClock, ran: list[object]) -> None:
    first = db.jobs.submit("first", [("mail", 1)])
    clock.advance(1)
    second = db.jobs.submit("second", [("mail", 2)])
    db.jobs.set_info(first, {"cursor": 17})
    assert db.jobs.get(first).info == {"cursor": 17}
    assert [j.id for j in db.jobs.list()] == [second, first]
    db.worker().run_until_idle(max_tasks=1)
    assert [j.id for j in db.jobs.list(open_only=True)] == [second]


def test_bad_input_is_refused_with_nothing_stored(db: sluice.Database, ran: list[object]) -> None:
    with pytest.raises(sluice.UnknownTaskType, match="fax"):
        db.jobs.submit("j", [("mail", 1), ("fax", 2)])
    with pytest.raises(sluice.ConfigurationError, match="at least one task"):
        db.jobs.submit("j", [])
    with pytest.raises(sluice.QueueNotFound):
        db.jobs.submit("j", [("mail", 1)], alert_queue="nowhere")
    with pytest.raises(sluice.ConfigurationError, match="JSON"):
        db.jobs.submit("j", [("mail", 1)], info={1, 2})
    with pytest.raises(sluice.ConfigurationError, match="max_attempts"):
        db.jobs.define("fax", max_attempts=0)
    with pytest.raises(sluice.UnknownTaskType, match="no function"):
        db.worker(tasks=["fax"])
    with pytest.raises(sluice.JobNotFound):
        db.jobs.get("1/2/3")
    assert db.jobs.list() == []
    assert db.queue("tasks.mail").stats()["ready"] == 0


def test_worker_threads_run_everything_once(db: sluice.Database) -> None:
    seen: list[object] = []
    lock = threading.Lock()
    done = threading.Event()

    @db.task("count")
    def count(task: Task) -> None:
        with lock:
            seen.append(task.body)
            if len(seen) == 200:
                done.set()

    job = db.jobs.submit("many", [("count", i) for i in range(200)])
    worker = db.worker(concurrency=4, poll=0.05)
    worker.start()
    assert done.wait(60)
    worker.stop()
    worker.join()
    assert sorted(seen) == list(range(200))  # type: ignore[type-var]
    assert db.jobs.get(job).status == "done"


def test_a_batch_settles_together_and_a_failing_task_alone_is_given_back(
    db: sluice.Database, clock: ManualClock
) -> None:
    db.create_queue("sent")

    @db.task("send", max_attempts=2, backoff=0.0)
    def send(task: Task) -> None:
        task.enqueue("sent", task.body)
        if task.body == 3 and task.attempts == 0:
            raise RuntimeError("first run of 3 fails")

    job = db.jobs.submit("batch", [("send", n) for n in range(6)])
    worker = db.worker(batch=6)
    assert worker.run_until_idle() == 7  # six runs in one batch (one failed), then the retry
    assert sorted(m.body for m in db.queue("sent").browse()) == list(range(6))
    status = db.jobs.get(job, tasks=True)
    assert (status.status, status.succeeded) == ("done", 6)
    assert sorted(t.attempts for t in status.tasks) == [1, 1, 1, 1, 1, 2]


def test_by_default_quick_tasks_share_commits_and_keep_their_order(db: sluice.Database) -> None:
    db.create_queue("sent")
    commits: list[int] = []

    @db.task("quick")
    def quick(task: Task) -> None:
        commits.append(task.transaction.number)
        task.enqueue("sent", task.body)

    db.jobs.submit("many", [("quick", n) for n in range(300)])
    assert db.worker().run_until_idle() == 300
    assert [m.body for m in db.queue("sent").browse(limit=1000)] == list(range(300))
    sizes = [len(list(group)) for _, group in itertools.groupby(commits)]
    assert sizes[0] == 1  # it starts at one task per commit ...
    assert max(sizes) > 1  # ... and settles quick tasks together


def test_adaptive_batches_grow_while_quick_and_shrink_to_fit_slow_tasks() -> None:
    quick = ADAPTIVE_BUDGET / 100  # seconds for a whole batch
    assert adapted_size(1, 1, quick) == 2
    assert adapted_size(8, 8, quick) == 16
    assert adapted_size(ADAPTIVE_MAX, ADAPTIVE_MAX, quick) == ADAPTIVE_MAX
    assert adapted_size(8, 3, quick) == 8  # fewer were ready: no growth for a trickle
    assert adapted_size(16, 16, ADAPTIVE_BUDGET * 2) == 8  # twice the budget: half
    assert adapted_size(4, 4, ADAPTIVE_BUDGET * 40) == 1  # slow tasks: one per commit
    assert adapted_size(1, 1, 0.0) == 2


def test_rollback_to_a_savepoint_undoes_only_later_enqueues(db: sluice.Database) -> None:
    db.create_queue("out")
    with db.transaction() as tx:
        tx.enqueue("out", "kept")
        mark = tx.savepoint()
        tx.enqueue("out", "undone")
        tx.rollback_to(mark)
        tx.enqueue("out", "also kept")
    assert [m.body for m in db.queue("out").browse()] == ["kept", "also kept"]
    db.queue("out").put("x")
    with db.transaction() as tx:
        mark = tx.savepoint()
        assert tx.dequeue("out", limit=5)
        with pytest.raises(sluice.TransactionError, match="abort it instead"):
            tx.rollback_to(mark)
        tx.abort()


def test_a_worker_of_two_task_types_wakes_for_a_task_of_the_second(
    db: sluice.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = threading.Event()

    @db.task("first")
    def first(task: Task) -> None:
        raise AssertionError("no task of the first type was submitted")

    @db.task("second")
    def second(task: Task) -> None:
        ran.set()

    # Seen through the engine's wake-ups: the worker has looked, found nothing, and waits.
    waiting = threading.Event()
    wakeups = db.context.wakeups
    wait = wakeups.wait

    def watched_wait(*args: Any, **kwargs: Any) -> None:
        waiting.set()
        wait(*args, **kwargs)

    monkeypatch.setattr(wakeups, "wait", watched_wait)
    worker = db.worker(poll=600)  # only a wake-up runs the task within the test's time
    worker.start()
    try:
        assert waiting.wait(30)
        db.jobs.submit("one of the second type", [("second", "x")])
        assert ran.wait(10)
    finally:
        worker.join()
