"""Database.get_any: the next message of whichever of several queues has one."""

from __future__ import annotations

import threading

import pytest

import sluice


def test_takes_in_the_order_given_and_settles_as_get_does(db: sluice.Database) -> None:
    a, b = db.create_queue("a"), db.create_queue("b")
    assert db.get_any(["a", "b"]) is None
    b.put("from b")
    a.put("from a")
    first = db.get_any(["b", "a"])
    assert first is not None
    assert (first.queue, first.body) == ("b", "from b")
    first.release()
    again = db.get_any(["a", "b"])
    assert again is not None
    assert (again.queue, again.body) == ("a", "from a")
    again.ack()
    redelivered = db.get_any(["a", "b"])
    assert redelivered is not None
    assert (redelivered.body, redelivered.attempts) == ("from b", 1)
    redelivered.ack()
    assert db.get_any(["a", "b"]) is None
    assert a.stats()["ready"] == b.stats()["ready"] == 0


def test_waits_for_a_put_into_any_of_them(db: sluice.Database) -> None:
    db.create_queue("a")
    b = db.create_queue("b")
    waiting = threading.Event()
    got: list[sluice.Message | None] = []

    def consume() -> None:
        waiting.set()
        got.append(db.get_any(["a", "b"], wait=30))

    consumer = threading.Thread(target=consume)
    consumer.start()
    waiting.wait()
    b.put("late")
    consumer.join()
    assert got[0] is not None
    assert (got[0].queue, got[0].body) == ("b", "late")
    got[0].ack()


def test_wakes_when_a_delayed_message_comes_due(db: sluice.Database) -> None:
    db.create_queue("a")
    db.create_queue("b").put("soon", delay=0.2)
    message = db.get_any(["a", "b"], wait=30)
    assert message is not None
    assert message.body == "soon"
    message.ack()


def test_a_subscription_takes_its_topics_messages(db: sluice.Database) -> None:
    topic = db.create_topic("news")
    db.subscribe("news", "reader")
    db.create_queue("other")
    topic.put({"n": 1})
    message = db.get_any(["other", "reader"], wait=5)
    assert message is not None
    assert (message.queue, message.body) == ("reader", {"n": 1})
    message.ack()


def test_refusals(db: sluice.Database) -> None:
    db.create_queue("a")
    with pytest.raises(sluice.QueueNotFound):
        db.get_any(["a", "missing"], wait=5)
    with pytest.raises(sluice.ConfigurationError, match="list of queue names"):
        db.get_any("a")
    with pytest.raises(sluice.ConfigurationError, match="list of queue names"):
        db.get_any([])
    with pytest.raises(sluice.ConfigurationError, match="wait"):
        db.get_any(["a"], wait=-1)
