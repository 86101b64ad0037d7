"""Kept outcomes (docs/retention.md): a queue with ``retention`` keeps what its
transactions settle as done, and upkeep removes it once it is that old, on every backend.

Times move on a ManualClock; ``db.recover()`` runs the upkeep a session's tick runs.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import sluice
from sluice import ManualClock, MessageState
from sluice.backends.records import READ_COLUMNS, CommitPlan
from sluice.backends.sqlite import SQLiteBackend
from sluice.engine import retention
from sluice.jobs import Task
from tests.conftest import schema_of

T0 = 1_800_000_000.0
DAY = 86_400.0


@pytest.fixture
def rows(backend_url: str) -> Iterator[RowReader]:
    """Reads the message table behind the test's Database (None on memory: no way in)."""
    reader = RowReader(backend_url)
    yield reader
    reader.close()


class RowReader:
    """The stored rows of a queue, read on a connection of the test's own."""

    def __init__(self, url: str) -> None:
        self._sqlite: sqlite3.Connection | None = None
        self._pg: psycopg.Connection[tuple[object, ...]] | None = None
        self._schema = ""
        if url.startswith("sqlite:///"):
            self._sqlite = sqlite3.connect(url.removeprefix("sqlite:///"))
        elif url.startswith("postgresql"):
            self._pg = psycopg.connect(url.partition("?")[0], autocommit=True)
            self._schema = f'"{schema_of(url)}".'

    @property
    def readable(self) -> bool:
        return self._sqlite is not None or self._pg is not None

    def of(self, queue: str) -> list[tuple[int, float | None, int | None]]:
        """(state, settled_at, c_session) of each of ``queue``'s rows, by id."""
        query = (
            f"SELECT m.state, m.settled_at, m.c_session FROM {self._schema}messages AS m "
            f"JOIN {self._schema}queues AS q ON q.id = m.queue_id WHERE q.name = %s ORDER BY m.id"
        )
        if self._sqlite is not None:
            found = self._sqlite.execute(query.replace("%s", "?"), (queue,)).fetchall()
        elif self._pg is not None:
            found = self._pg.execute(query, (queue,)).fetchall()
        else:
            raise AssertionError("memory:// is private to its Database")
        return [(int(s), None if t is None else float(t), c) for s, t, c in found]

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._pg is not None:
            self._pg.close()


def _done(q: sluice.Queue) -> list[object]:
    return [m.body for m in q.browse(state="done", limit=10_000)]


# --- what is kept ---------------------------------------------------------------------
def test_ack_keeps_the_message_as_done_settled_by_the_databases_clock(
    db: sluice.Database, clock: ManualClock, rows: RowReader
) -> None:
    q = db.create_queue("audit", retention=60)
    q.put({"n": 1})
    q.put({"n": 2})
    clock.advance(5)
    m = q.get()
    assert m is not None
    m.ack()

    (kept,) = q.browse(state="done")
    assert kept.id == m.id
    assert kept.body == {"n": 1}
    assert kept.state is MessageState.DONE
    assert [x.body for x in q.browse()] == [{"n": 2}]  # not ready, not claimable again
    assert q.stats() == {
        "ready": 1, "delayed": 0, "pending": 0, "claimed": 0, "expired": 0, "failed": 0,
        "done": 1,
    }  # fmt: skip
    second = q.get()
    assert second is not None
    assert second.body == {"n": 2}
    assert q.get() is None
    second.release()
    if rows.readable:
        assert rows.of("audit") == [(6, T0 + 5, None), (1, None, None)]


def test_a_transaction_keeps_what_it_took_from_a_queue_with_retention_only(
    db: sluice.Database, clock: ManualClock, rows: RowReader
) -> None:
    kept, plain, out = (
        db.create_queue("kept", retention="forever"),
        db.create_queue("plain"),
        db.create_queue("out"),
    )
    kept.put_many(["k1", "k2", "k3", "k4"])
    plain.put_many(["p1", "p2", "p3"])
    with db.transaction() as tx:  # a mixed commit: kept, deleted and an enqueue at once
        assert len(tx.dequeue("kept", limit=3)) == 3
        assert len(tx.dequeue("plain", limit=2)) == 2
        tx.enqueue("out", "made")
    with db.transaction() as tx:  # kept and deleted, nothing else
        tx.dequeue("kept")
        tx.dequeue("plain")
    assert _done(kept) == ["k1", "k2", "k3", "k4"]
    assert plain.stats()["done"] == 0
    assert _done(plain) == []
    assert [m.body for m in out.browse()] == ["made"]
    with db.transaction() as tx:  # kept and deleted alone: each one statement
        tx.dequeue("out")
    assert out.stats() == dict.fromkeys(out.stats(), 0)
    if rows.readable:
        assert rows.of("plain") == []  # deleted, as ever
        assert rows.of("out") == []
        assert rows.of("kept") == [(6, T0, None)] * 4


def test_done_messages_browse_in_the_order_they_were_settled(
    db: sluice.Database, clock: ManualClock
) -> None:
    q = db.create_queue("audit", retention=60)
    q.put({"n": 1})
    q.put({"n": 2})
    q.put({"n": 3}, priority=9)
    early, late = db.begin(), db.begin()
    (urgent,) = early.dequeue("audit")
    (first,) = early.dequeue("audit")
    (second,) = late.dequeue("audit")
    assert [urgent.body, first.body, second.body] == [{"n": 3}, {"n": 1}, {"n": 2}]
    late.commit()
    clock.advance(1)
    early.commit()
    assert _done(q) == [{"n": 2}, {"n": 1}, {"n": 3}]  # settle order, then id
    assert [m.body for m in q.browse(state="done", limit=1)] == [{"n": 2}]
    selected = q.browse(state="done", where="body.n <> 2", order_by=["body.n DESC"])
    assert [m.body for m in selected] == [{"n": 3}, {"n": 1}]


def test_a_queue_without_retention_still_deletes_what_is_settled(
    db: sluice.Database, rows: RowReader
) -> None:
    q = db.create_queue("plain")
    q.put_many(["a", "b"])
    m = q.get()
    assert m is not None
    m.ack()
    with db.transaction() as tx:
        tx.dequeue("plain")
    assert q.stats() == dict.fromkeys(q.stats(), 0)
    assert _done(q) == []
    if rows.readable:
        assert rows.of("plain") == []  # the row is gone


def test_release_and_abort_do_not_make_a_message_done(db: sluice.Database) -> None:
    q = db.create_queue("audit", retention=60)
    q.put_many(["a", "b", "c"])
    m = q.get()
    assert m is not None
    m.release()
    with db.transaction() as tx:
        tx.dequeue("audit", limit=3)
        tx.abort()
    with db.transaction() as tx:  # one of two given back, the other kept
        first, second = tx.dequeue("audit", limit=2)
        tx.release(second)
    assert _done(q) == [first.body]
    assert q.stats()["ready"] == 2
    assert sorted(m.body for m in q.browse()) == ["b", "c"]


def test_reject_and_dead_letters_keep_their_ways(db: sluice.Database) -> None:
    q = db.create_queue("audit", retention=60, error_queue="audit.errors", max_attempts=1)
    bare = db.create_queue("bare", retention=60)
    q.put_many(["rejected", "tried"])
    bare.put("failed")
    m = q.get()
    assert m is not None
    m.reject("bad")
    m = q.get()
    assert m is not None
    m.release()  # its one attempt: to the error queue
    m = bare.get()
    assert m is not None
    m.reject("no error queue")
    errors = db.queue("audit.errors").browse()
    assert [(e.body, e.error) for e in errors] == [
        ("rejected", "bad"),
        ("tried", "reached max_attempts (1)"),
    ]
    assert q.stats()["done"] == bare.stats()["done"] == 0
    assert [f.body for f in bare.browse(state="failed")] == ["failed"]
    bare.put_many(["kept", "also failed"])
    with db.transaction() as tx:  # one rejected, the other kept, in one commit
        good, bad = tx.dequeue("bare", limit=2)
        tx.reject(bad, "bad")
    assert _done(bare) == [good.body]
    assert [f.body for f in bare.browse(state="failed")] == ["failed", "also failed"]


def test_a_message_of_a_group_kept_as_done_lets_the_next_one_go(db: sluice.Database) -> None:
    q = db.create_queue("steps", retention=60)
    q.put_many(["first", "second"], group="order-1")
    m = q.get()
    assert m is not None
    assert m.body == "first"
    assert q.get() is None  # the group's next waits for the first to be settled
    m.ack()
    m = q.get()
    assert m is not None
    assert m.body == "second"
    m.ack()
    assert _done(q) == ["first", "second"]


def test_stats_counts_done_for_every_queue(db: sluice.Database) -> None:
    db.create_queue("plain")
    q = db.create_queue("audit", retention=60)
    q.put_many(list(range(5)))
    with db.transaction() as tx:
        tx.dequeue("audit", limit=4)
    assert db.queue("plain").stats()["done"] == 0
    assert q.stats()["done"] == 4
    assert len(q) == 1


# --- how long ---------------------------------------------------------------------
def test_upkeep_removes_done_messages_once_their_retention_has_passed(
    db: sluice.Database, clock: ManualClock
) -> None:
    q = db.create_queue("audit", retention=60, max_attempts=1)
    forever = db.create_queue("ledger", retention="forever")
    q.put_many(["a", "b", "poison", "waiting"])
    forever.put("kept for good")
    for body in ("a", "b"):
        m = q.get()
        assert m is not None
        assert m.body == body
        m.ack()
        clock.advance(30)  # a settled at T0, b at T0 + 30
    m = q.get()
    assert m is not None
    m.release()  # out of attempts: failed, which retention does not touch
    m = forever.get()
    assert m is not None
    m.ack()

    clock.set(T0 + 59.5)
    db.recover()
    assert _done(q) == ["a", "b"]
    clock.set(T0 + 60)
    db.recover()
    assert _done(q) == ["b"]
    clock.set(T0 + 90)
    db.recover()
    assert _done(q) == []
    clock.advance(100 * 365 * DAY)
    db.recover()
    assert _done(forever) == ["kept for good"]
    assert [x.body for x in q.browse()] == ["waiting"]
    assert [x.body for x in q.browse(state="failed")] == ["poison"]


def test_removal_runs_in_bounded_batches(
    db: sluice.Database, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = db.create_queue("audit", retention=DAY)
    q.put_many(list(range(2_500)))
    with db.transaction() as tx:
        assert len(tx.dequeue("audit", limit=2_500)) == 2_500
    clock.advance(DAY)
    assert db.backend.remove_kept(retention.BATCH) == retention.BATCH  # one statement's worth
    assert q.stats()["done"] == 1_500
    monkeypatch.setattr(retention, "BATCH", 400)
    monkeypatch.setattr(retention, "MAX_BATCHES", 2)
    db.recover()  # one run: at most two batches of 400
    assert q.stats()["done"] == 700
    db.recover()
    assert q.stats()["done"] == 0
    monkeypatch.undo()
    q.put_many(list(range(2_500)))
    with db.transaction() as tx:
        tx.dequeue("audit", limit=2_500)
    clock.advance(DAY)
    db.recover()  # several batches in one run, down to the last short one
    assert q.stats()["done"] == 0


def test_purge_done_by_when_it_was_settled(db: sluice.Database, clock: ManualClock) -> None:
    q = db.create_queue("audit", retention="forever")
    q.put_many(["old", "older", "new"])
    clock.advance(DAY)  # enqueued long before any was settled
    with db.transaction() as tx:
        tx.dequeue("audit", limit=2)
    clock.advance(100)
    m = q.get()
    assert m is not None
    m.ack()
    clock.advance(50)
    assert q.purge("done", older_than=100) == 2  # settled 150 s ago; "new" 50 s ago
    assert _done(q) == ["new"]
    assert q.purge("done") == 1
    assert q.stats() == dict.fromkeys(q.stats(), 0)


def test_alter_queue_turns_retention_on_and_off(
    db: sluice.Database, clock: ManualClock, rows: RowReader
) -> None:
    q = db.create_queue("audit")
    q.put_many(["before", "during", "after"])

    def ack() -> None:
        m = q.get()
        assert m is not None
        m.ack()

    ack()
    assert db.alter_queue("audit", retention=3600).retention == 3600
    ack()
    assert _done(q) == ["during"]
    db.recover()
    assert _done(q) == ["during"]  # within its hour
    assert db.alter_queue("audit", retention=None).retention is None
    ack()
    assert _done(q) == ["during"]  # "after" was deleted at once
    db.recover()  # a queue that keeps nothing now: what it kept goes
    assert _done(q) == []
    if rows.readable:
        assert rows.of("audit") == []


def test_a_subscription_with_retention_keeps_what_its_consumers_settle(
    db: sluice.Database, clock: ManualClock
) -> None:
    topic = db.create_topic("news")
    reader = db.subscribe("news", "reader", retention=60)
    other = db.subscribe("news", "other")
    topic.put_many([{"n": 1}, {"n": 2}])
    for sub in (reader, other):
        m = sub.get()
        assert m is not None
        m.ack()
    assert _done(reader) == [{"n": 1}]
    assert reader.stats()["done"] == 1
    assert reader.stats()["ready"] == 1
    assert other.stats()["done"] == 0
    clock.advance(60)
    db.recover()
    assert _done(reader) == []


def test_a_queue_with_kept_messages_can_be_dropped(db: sluice.Database) -> None:
    q = db.create_queue("audit", retention="forever")
    q.put("x")
    m = q.get()
    assert m is not None
    m.ack()
    db.drop_queue("audit")
    again = db.create_queue("audit", retention="forever")
    assert again.stats() == dict.fromkeys(again.stats(), 0)


def test_a_task_queue_with_retention_keeps_finished_tasks(db: sluice.Database) -> None:
    ran: list[object] = []

    @db.task("mail")
    def mail(task: Task) -> None:
        ran.append(task.body)

    db.alter_queue("tasks.mail", retention=DAY)
    db.jobs.submit_task("mail", {"to": "smith"})
    assert db.worker().run_until_idle() == 1
    assert ran == [{"to": "smith"}]
    assert [m.body for m in db.queue("tasks.mail").browse(state="done")] == [{"to": "smith"}]


# --- Spark streams, without Spark ---------------------------------------------------
@pytest.mark.parametrize("group", [None, "g"], ids=["spooled", "in-place"])
def test_a_stream_settles_into_done_on_a_queue_with_retention(
    db: sluice.Database, clock: ManualClock, group: str | None
) -> None:
    q = db.create_queue("orders", retention=60)
    q.put_many([{"n": n} for n in range(4)], group=group)
    backend = db.backend
    stream = backend.open_stream("orders", "s")
    if group is None:  # PostgreSQL moves such a round into the stream's spool
        assert backend.stream_claim(stream.session, 1, "orders", 3, None) == 3
    else:  # a lane's run, claimed in place by the engine's claim
        assert len(backend.claim(stream.session, 1, "orders", 3, own=False)) == 3
    backend.set_stream_round(stream.session, 1)
    clock.advance(10)
    backend.stream_settle(stream.session, "orders", 0, 1)
    assert q.stats()["claimed"] == 0
    assert q.stats()["done"] == 3
    (last,) = q.browse()  # the lane's next one got its turn
    assert last.body == {"n": 3}
    assert backend.stream_held(stream.session, "orders", 0, 1) == []  # nothing held
    assert _done(q) == [{"n": 0}, {"n": 1}, {"n": 2}]
    low, high, _ = backend.id_bounds("orders")  # a batch read of the history, by id
    read = backend.scan("orders", "done", low - 1, high, limit=10, select=None)
    body = READ_COLUMNS.index("body")  # a read's rows are plain tuples (spark/rows.py)
    assert [json.loads(str(r[body])) for r in read] == [{"n": 0}, {"n": 1}, {"n": 2}]
    clock.set(T0 + 69.5)
    db.recover()
    assert q.stats()["done"] == 3  # settled at T0 + 10
    clock.set(T0 + 70)
    db.recover()
    assert q.stats()["done"] == 0


# --- SQLite's group commit and PostgreSQL's outbox ----------------------------------
def test_group_commit_keeps_and_deletes_plan_by_plan(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}", clock=ManualClock(T0)) as db:
        kept, plain = db.create_queue("kept", retention=60), db.create_queue("plain")
        kept.put_many(["k1", "k2"])
        plain.put("p1")
        backend = db.backend
        assert isinstance(backend, SQLiteBackend)
        k1, k2 = (r.id for r in backend.claim(db.session, 9001, "kept", 2, own=False))
        (p1,) = (r.id for r in backend.claim(db.session, 9002, "plain", 1, own=False))
        plans = [
            CommitPlan(db.session, 9001, held=[k1, k2], kept=[k1, k2], settled_at=T0),
            CommitPlan(db.session, 9002, held=[p1]),
            CommitPlan(db.session, 9003, held=[k1], kept=[k1], settled_at=T0),  # not held
        ]
        results = backend.commit_many(plans)
        assert results[:2] == [None, None]
        assert isinstance(results[2], sluice.LeaseLost)
        assert _done(kept) == ["k1", "k2"]
        assert plain.stats() == dict.fromkeys(plain.stats(), 0)


def test_the_outbox_keeps_what_it_settles(backend_url: str) -> None:
    if not backend_url.startswith("postgresql"):
        pytest.skip("the outbox is PostgreSQL's")
    with sluice.connect(backend_url, clock=ManualClock(T0)) as db:
        q = db.create_queue("events", retention=60)
        q.put_many(["a", "b"])
        with psycopg.connect(backend_url.partition("?")[0]) as business:
            with db.transaction(connection=business) as tx:
                tx.dequeue("events")
            assert _done(q) == []  # the caller's transaction has not committed yet
            business.commit()
        assert _done(q) == ["a"]
        assert [m.body for m in q.browse()] == ["b"]


# --- bad input --------------------------------------------------------------------
@pytest.mark.parametrize("bad", [-1, "soon", True, float("nan")])
def test_bad_retention_is_refused_and_changes_nothing(db: sluice.Database, bad: object) -> None:
    db.create_queue("audit", retention=60)
    db.create_topic("news")
    before = db.queues()
    with pytest.raises(sluice.ConfigurationError, match="retention"):
        db.create_queue("other", retention=bad)  # type: ignore[arg-type]
    with pytest.raises(sluice.ConfigurationError, match="retention"):
        db.alter_queue("audit", retention=bad)  # type: ignore[arg-type]
    with pytest.raises(sluice.ConfigurationError, match="retention"):
        db.subscribe("news", "reader", retention=bad)  # type: ignore[arg-type]
    assert db.queues() == before
    assert db.queue("audit").spec.retention == 60
