"""Pausing and resuming queues (docs/queues.md#pausing) on every backend: a paused queue
gives its consumers nothing, whoever paused it, while producers and browsing go on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import sluice
from sluice import ManualClock
from sluice.jobs import Task

T0 = 1_700_000_000.0


def _when_waiting(db: sluice.Database) -> threading.Event:
    """An event set when a consumer of ``db`` starts to wait for news."""
    wakeups = db.context.wakeups
    original: Callable[..., None] = wakeups.wait
    waiting = threading.Event()

    def wait(*args: Any, **kwargs: Any) -> None:
        waiting.set()
        original(*args, **kwargs)

    wakeups.wait = wait  # type: ignore[method-assign]
    return waiting


def test_a_paused_queue_gives_nothing_yet_takes_messages_and_shows_them(
    db: sluice.Database,
) -> None:
    q = db.create_queue("orders")
    q.put_many([{"n": 1, "region": "eu"}, {"n": 2, "region": "us"}])
    assert not q.paused
    q.pause()
    assert q.paused
    assert db.queue("orders").spec.paused
    q.put({"n": 3, "region": "eu"})  # producers go on
    assert q.get() is None
    assert q.get(where="body.region = 'eu'") is None
    assert q.get(order_by=["body.n DESC"]) is None
    with db.transaction() as tx:
        assert tx.dequeue("orders", limit=10) == []
        assert tx.dequeue("orders", limit=10, where="body.n > 1", order_by=["body.n"]) == []
    assert [m.body["n"] for m in q.browse()] == [1, 2, 3]
    assert q.stats()["ready"] == 3
    q.pause()  # again: nothing changes
    q.resume()
    assert not q.paused
    m = q.get(where="body.region = 'eu'", order_by=["body.n DESC"])
    assert m is not None
    assert m.body == {"n": 3, "region": "eu"}
    m.ack()
    with db.transaction() as tx:
        assert [m.body["n"] for m in tx.dequeue("orders", limit=10)] == [1, 2]


def test_a_transaction_takes_none_of_its_own_enqueues_from_a_paused_queue(
    db: sluice.Database,
) -> None:
    db.create_queue("orders").pause()
    with db.transaction() as tx:
        tx.enqueue("orders", "own")
        assert tx.dequeue("orders") == []
    assert [m.body for m in db.queue("orders").browse()] == ["own"]


def test_a_paused_queue_holds_back_its_groups_and_the_held_lane_s_next(
    db: sluice.Database,
) -> None:
    q = db.create_queue("orders")
    q.put_many(["a1", "a2", "a3"], group="a")
    q.put("b1", group="b")
    with db.transaction() as tx:
        (first,) = tx.dequeue("orders")
        assert first.body == "a1"
        q.pause()
        # Neither the next message of the lane it holds nor another group's head.
        assert tx.dequeue("orders", limit=5) == []
        q.resume()
        assert [m.body for m in tx.dequeue("orders", limit=5)] == ["a2", "a3", "b1"]


def test_a_transaction_in_the_caller_s_own_takes_nothing_from_a_paused_queue(
    db: sluice.Database,
) -> None:
    if db.backend.dialect != "postgresql":
        pytest.skip("a queue transaction in the caller's own transaction is PostgreSQL's")
    import psycopg

    q = db.create_queue("orders", isolation="ordered")
    q.put_many(["a", "b"])
    with psycopg.connect(db.backend.conninfo) as business:  # type: ignore[attr-defined]
        tx = db.begin(connection=business)
        tx.enqueue("orders", "own")
        assert [m.body for m in tx.dequeue("orders")] == ["a"]
        q.pause()
        assert tx.dequeue("orders", limit=5) == []  # not even its lane's next, nor its own
        q.resume()
        assert sorted(m.body for m in tx.dequeue("orders", limit=5)) == ["b", "own"]
        tx.commit()
        business.commit()


def test_messages_held_before_the_pause_are_settled_as_usual(db: sluice.Database) -> None:
    q = db.create_queue("orders")
    q.put_many(["x", "y"])
    held = q.get()
    assert held is not None
    q.pause()
    held.release()  # back in the queue, and still not given out
    assert q.get() is None
    assert q.stats()["ready"] == 2


def test_pausing_a_queue_that_does_not_exist(db: sluice.Database) -> None:
    with pytest.raises(sluice.QueueNotFound):
        db.queue("nope").pause()
    q = db.create_queue("gone")
    db.drop_queue("gone")
    with pytest.raises(sluice.QueueNotFound):
        q.pause()
    with pytest.raises(sluice.QueueNotFound):
        q.resume()


def test_a_topic_is_not_paused_its_subscriptions_are(db: sluice.Database) -> None:
    news = db.create_topic("news")
    db.subscribe("news", "paused-reader")
    db.subscribe("news", "reader")
    with pytest.raises(sluice.ConfigurationError, match="pause or resume its subscriptions"):
        news.pause()
    db.queue("paused-reader").pause()
    news.put("headline")
    assert db.queue("paused-reader").get() is None
    assert db.queue("paused-reader").stats()["ready"] == 1
    m = db.queue("reader").get()
    assert m is not None
    assert m.body == "headline"
    m.ack()
    db.queue("paused-reader").resume()
    again = db.queue("paused-reader").get()
    assert again is not None
    assert again.body == "headline"
    again.ack()


def test_altering_a_paused_queue_leaves_it_paused(db: sluice.Database) -> None:
    q = db.create_queue("orders")
    q.pause()
    assert db.alter_queue("orders", max_attempts=3).paused
    assert q.paused
    assert [s.paused for s in db.queues()] == [True]


def test_resume_wakes_a_waiting_consumer(db: sluice.Database) -> None:
    q = db.create_queue("orders")
    q.pause()
    q.put("held back")
    got: list[Any] = []
    waiting = _when_waiting(db)
    consumer = threading.Thread(target=lambda: got.append(q.get(wait=60)))
    consumer.start()
    assert waiting.wait(10)  # it found nothing and waits
    q.resume()
    consumer.join(10)
    assert not consumer.is_alive(), "resume did not wake the waiting consumer"
    assert got[0] is not None
    assert got[0].body == "held back"
    got[0].ack()


def test_another_connection_s_pause_holds_at_once_and_its_resume_wakes(
    shared_url: str,
) -> None:
    # Waiters would only look again in a minute: only a wake-up gets the message in time.
    slow = shared_url + "&fallback=60" if shared_url.startswith("postgresql") else shared_url
    with sluice.connect(slow, poll_interval=60) as consumer, sluice.connect(shared_url) as admin:
        q = admin.create_queue("orders")
        q.put_many(["first", "second"])
        taken = consumer.queue("orders").get()  # its settings are cached now
        assert taken is not None
        taken.ack()
        q.pause()
        assert consumer.queue("orders").get() is None  # not a second later: now
        got: list[Any] = []
        waiting = _when_waiting(consumer)
        thread = threading.Thread(target=lambda: got.append(consumer.queue("orders").get(wait=60)))
        thread.start()
        assert waiting.wait(10)
        q.resume()
        thread.join(20)
        assert not thread.is_alive(), "another connection's resume did not wake the consumer"
        assert got[0] is not None
        assert got[0].body == "second"
        got[0].ack()


def test_a_worker_runs_no_task_of_a_paused_task_queue(db: sluice.Database) -> None:
    ran: list[object] = []

    @db.task("mail")
    def mail(task: Task) -> None:
        ran.append(task.body)

    db.queue("tasks.mail").pause()
    db.jobs.submit("newsletter", [("mail", "a"), ("mail", "b")])
    worker = db.worker()
    assert worker.run_until_idle() == 0
    assert ran == []
    db.queue("tasks.mail").resume()
    assert worker.run_until_idle() == 2
    assert sorted(ran) == ["a", "b"]  # type: ignore[type-var]


ROUTING = """
CREATE QUEUE orders;
CREATE QUEUE billing;
CREATE RULE route FOR orders
  IF body.total > 0 THEN ENQUEUE json_object('order', body.id) INTO billing;
"""

SLICES = """
CREATE QUEUE orders;
CREATE QUEUE assembled;
CREATE PROPERTY orderID AS text QUEUE orders VALUE body.order;
CREATE SLICING byOrder ON orderID;
CREATE RULE assemble FOR byOrder
  IF (SELECT count(*) FROM slice() AS s) = 3 THEN
    ENQUEUE json_object('order', slicekey()) INTO assembled, RESET;
"""


@pytest.mark.parametrize("definition", [ROUTING, SLICES], ids=["batch", "slices"])
def test_the_rules_engine_takes_no_trigger_from_a_paused_queue(
    db: sluice.Database, definition: str
) -> None:
    db.clock = ManualClock(T0)
    db.apply(definition)
    orders = db.queue("orders")
    orders.pause()
    orders.put_many([{"id": n, "total": 1.0, "order": "a"} for n in range(3)])
    assert db.rules.run_until_idle().processed == 0
    assert orders.stats()["ready"] == 3
    orders.resume()
    assert db.rules.run_until_idle().processed == 3
