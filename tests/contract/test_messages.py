"""Enqueue, claim, settle: the behaviour every backend must show."""

from __future__ import annotations

import threading
import time

import pytest

import sluice
from sluice import MessageState

from .aio_facade import both_apis  # noqa: F401 (the fixture: every test over both APIs)


def test_put_returns_session_transaction_message_id(db: sluice.Database, q: sluice.Queue) -> None:
    first = q.put({"n": 1})
    second = q.put({"n": 2})
    s1, t1, m1 = map(int, first.split("/"))
    s2, t2, m2 = map(int, second.split("/"))
    assert s1 == s2 == db.session
    assert t2 > t1
    assert m1 == m2 == 1


def test_message_carries_everything_that_was_put(q: sluice.Queue) -> None:
    mid = q.put(
        {"customer": "Smith"},
        priority=3,
        properties={"region": "eu"},
        correlation_id="c-1",
        reply_to="answers",
    )
    m = q.get()
    assert m is not None
    assert m.id == mid
    assert m.queue == "orders"
    assert m.body == {"customer": "Smith"}
    assert m.content_type == "application/json"
    assert m.priority == 3
    assert m.properties == {"region": "eu"}
    assert m.correlation_id == "c-1"
    assert m.reply_to == "answers"
    assert m.attempts == 0
    assert m.expires_at is None
    assert m.enqueued_at == m.available_at
    assert m.state is MessageState.CLAIMED
    m.ack()


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ({"a": [1, 2.5, None, True]}, "application/json"),
        ([1, "two"], "application/json"),
        (42, "application/json"),
        (None, "application/json"),
        (False, "application/json"),
        ("plain text é 漢字", "text/plain; charset=utf-8"),
        (b"\x00\xffbinary", "application/octet-stream"),
        ("", "text/plain; charset=utf-8"),
        (b"", "application/octet-stream"),
    ],
)
def test_bodies_round_trip_with_their_content_type(
    q: sluice.Queue, body: object, content_type: str
) -> None:
    q.put(body)
    m = q.get()
    assert m is not None
    assert m.body == body
    assert type(m.body) is type(body)
    assert m.content_type == content_type
    m.ack()


def test_explicit_content_type_is_kept(q: sluice.Queue) -> None:
    q.put("<order id='1'/>", content_type="application/xml")
    q.put('"a json string"', content_type="application/json")
    first, second = q.browse()
    assert (first.body, first.content_type) == ("<order id='1'/>", "application/xml")
    assert second.body == '"a json string"'


def test_higher_priority_first_then_fifo(q: sluice.Queue) -> None:
    for n, priority in enumerate([0, 5, 0, 5, -1, 9, 0]):
        q.put({"n": n}, priority=priority)
    order = []
    while (m := q.get()) is not None:
        order.append(m.body["n"])
        m.ack()
    assert order == [5, 1, 3, 0, 2, 6, 4]


def test_get_on_empty_queue_returns_none(q: sluice.Queue) -> None:
    assert q.get() is None
    assert q.get(wait=0.01) is None


def test_claimed_message_is_invisible_to_others_until_settled(q: sluice.Queue) -> None:
    q.put("a")
    q.put("b")
    m = q.get()
    assert m is not None
    assert [x.body for x in q.browse()] == ["b"]
    other = q.get()
    assert other is not None
    assert other.body == "b"
    m.release()
    assert [x.body for x in q.browse()] == ["a"]
    other.ack()


def test_ack_removes_the_message(q: sluice.Queue) -> None:
    q.put("a")
    m = q.get()
    assert m is not None
    m.ack()
    assert q.get() is None
    assert q.stats()["ready"] == 0
    assert q.stats()["claimed"] == 0


def test_release_returns_message_to_its_original_place(q: sluice.Queue) -> None:
    for body in "abc":
        q.put(body)
    m = q.get()
    assert m is not None
    assert m.body == "a"
    m.release()
    again = q.get()
    assert again is not None
    assert (again.body, again.attempts) == ("a", 1)
    again.ack()


def test_settling_twice_is_refused(q: sluice.Queue) -> None:
    q.put("a")
    m = q.get()
    assert m is not None
    m.ack()
    with pytest.raises(sluice.MessageStateError, match="already been settled"):
        m.ack()
    with pytest.raises(sluice.MessageStateError):
        m.release()
    with pytest.raises(sluice.MessageStateError):
        m.reject("late")


def test_browsed_message_cannot_be_settled(q: sluice.Queue) -> None:
    q.put("a")
    (m,) = q.browse()
    with pytest.raises(sluice.MessageStateError, match="browsed"):
        m.ack()
    assert q.stats()["ready"] == 1


def test_max_attempts_moves_message_to_error_queue_with_reason(db: sluice.Database) -> None:
    q = db.create_queue("jobs", max_attempts=2, error_queue="jobs.errors")
    q.put({"job": 1})
    q.put({"job": 2})
    for _ in range(2):
        m = q.get()
        assert m is not None
        assert m.body == {"job": 1}
        m.release()
    m = q.get()
    assert m is not None
    assert m.body == {"job": 2}
    m.ack()
    (dead,) = db.queue("jobs.errors").browse()
    assert dead.body == {"job": 1}
    assert dead.attempts == 2
    assert dead.error == "reached max_attempts (2)"
    assert dead.origin_queue == "jobs"
    assert q.stats()["ready"] == 0


def test_max_attempts_without_error_queue_keeps_message_as_failed(db: sluice.Database) -> None:
    q = db.create_queue("jobs", max_attempts=1)
    q.put("poison")
    m = q.get()
    assert m is not None
    m.release()
    assert q.get() is None
    assert q.stats()["failed"] == 1
    (failed,) = q.browse(state="failed")
    assert (failed.body, failed.state, failed.error) == (
        "poison",
        MessageState.FAILED,
        "reached max_attempts (1)",
    )


def test_reject_sends_to_error_queue_at_once(db: sluice.Database) -> None:
    q = db.create_queue("jobs", max_attempts=5, error_queue="jobs.dlq")
    q.put("bad")
    m = q.get()
    assert m is not None
    m.reject("cannot parse")
    (dead,) = db.queue("jobs.dlq").browse()
    assert (dead.body, dead.error, dead.origin_queue) == ("bad", "cannot parse", "jobs")
    assert q.stats()["ready"] == 0


def test_ttl_expired_message_is_never_delivered_and_kept(q: sluice.Queue) -> None:
    q.put("stale", ttl=0.001)
    q.put("fresh", ttl=60)
    deadline = time.time() + 0.001
    while time.time() <= deadline:
        pass  # the ttl is measured on the wall clock; let it pass (1 ms)
    m = q.get()
    assert m is not None
    assert m.body == "fresh"
    assert m.expires_at is not None
    m.ack()
    assert q.get() is None
    stats = q.stats()
    assert stats["expired"] == 1
    (expired,) = q.browse(state="expired")
    assert expired.body == "stale"


def test_delayed_message_is_invisible_until_due(q: sluice.Queue) -> None:
    q.put("later", delay=30)
    q.put("now")
    m = q.get()
    assert m is not None
    assert m.body == "now"
    m.ack()
    assert q.get() is None
    assert q.stats()["delayed"] == 1
    (later,) = q.browse(state="delayed")
    assert later.body == "later"


@pytest.mark.serial  # a bound on its wall time: run alone, not beside other tests
def test_blocking_get_wakes_for_a_delayed_message_when_due(q: sluice.Queue) -> None:
    q.put("soon", delay=0.2)
    started = time.monotonic()
    m = q.get(wait=10)
    elapsed = time.monotonic() - started
    assert m is not None
    assert m.body == "soon"
    assert 0.1 < elapsed < 5
    m.ack()


@pytest.mark.serial  # a bound on its wall time: run alone, not beside other tests
def test_blocking_get_wakes_when_work_arrives(q: sluice.Queue) -> None:
    arrived = threading.Event()
    got: list[object] = []

    def consume() -> None:
        arrived.set()
        m = q.get(wait=10)
        assert m is not None
        got.append(m.body)
        m.ack()

    consumer = threading.Thread(target=consume)
    consumer.start()
    arrived.wait()
    started = time.monotonic()
    q.put("wake up")
    consumer.join(10)
    assert got == ["wake up"]
    assert time.monotonic() - started < 2


def test_stats_count_by_state(db: sluice.Database, q: sluice.Queue) -> None:
    q.put("a")
    q.put("b")
    q.put("c", delay=60)
    held = q.get()
    tx = db.begin()
    tx.enqueue("orders", "uncommitted")
    tx.dequeue("orders")  # flushes its enqueue as pending, takes "b"
    stats = q.stats()
    assert stats == {
        "ready": 0,
        "delayed": 1,
        "pending": 1,
        "claimed": 2,
        "expired": 0,
        "failed": 0,
        "done": 0,
    }
    tx.abort()
    assert held is not None
    held.ack()
    assert len(q) == 1


def test_put_many_enqueues_in_one_transaction_in_order(q: sluice.Queue) -> None:
    ids = q.put_many([{"n": n} for n in range(5)], priority=2, properties={"batch": True})
    assert len(set(ids)) == 5
    assert len({i.rsplit("/", 1)[0] for i in ids}) == 1  # one producer transaction
    got = q.browse()
    assert [m.body["n"] for m in got] == [0, 1, 2, 3, 4]
    assert [m.id for m in got] == ids
    assert all(m.priority == 2 and m.properties == {"batch": True} for m in got)


def test_put_many_refuses_the_whole_batch_if_one_body_is_bad(q: sluice.Queue) -> None:
    with pytest.raises(sluice.InvalidBody):
        q.put_many([1, 2, {3}])
    assert q.browse() == []


def test_purge_removes_only_kept_outcomes(db: sluice.Database) -> None:
    q = db.create_queue("jobs", max_attempts=1)
    q.put("poison")
    q.put("stale", ttl=0.001)
    q.put("live")
    m = q.get()
    assert m is not None
    m.release()  # out of attempts: kept as failed
    deadline = time.time() + 0.001
    while time.time() <= deadline:
        pass  # the ttl is measured on the wall clock; let it pass (1 ms)
    assert q.purge("failed", older_than=3600) == 0  # too recent
    assert q.purge("failed") == 1
    assert q.purge("expired") == 1
    assert [m.body for m in q.browse()] == ["live"]
    assert q.stats()["failed"] == q.stats()["expired"] == 0
    with pytest.raises(sluice.ConfigurationError, match="only ready, expired, failed or done"):
        q.purge("claimed")  # type: ignore[arg-type]
