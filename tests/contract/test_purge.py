"""Purging ready messages (docs/queues.md#purging) on every backend, over both APIs: what
is not yet delivered goes, ready or delayed, in one transaction; what a consumer holds
and what a transaction has not committed stay."""

from __future__ import annotations

import threading

import pytest

import sluice

from .aio_facade import both_apis  # noqa: F401 (the fixture: every test over both APIs)


def test_ready_and_delayed_go_held_and_kept_stay(db: sluice.Database) -> None:
    q = db.create_queue("orders")
    q.put_many([1, 2, 3, 4])
    q.put(5, delay=3600)
    held = q.get()
    assert held is not None
    assert held.body == 1
    failed = q.get()
    assert failed is not None
    failed.reject("bad")  # kept as failed: the queue has no error queue
    assert q.purge("ready") == 3  # 3 and 4 ready, 5 delayed
    counts = q.stats()
    assert (counts["ready"], counts["delayed"], counts["claimed"], counts["failed"]) == (0, 0, 1, 1)
    (seen,) = [o for o in db.overview() if o.name == "orders"]
    assert seen.depth == 1
    assert q.get() is None
    held.ack()  # the holder settles it as ever
    assert q.stats()["claimed"] == 0
    assert q.purge("ready") == 0
    q.put(6)  # the queue goes on
    after = q.get()
    assert after is not None
    assert after.body == 6
    after.ack()


def test_uncommitted_messages_stay_and_arrive_at_commit(db: sluice.Database) -> None:
    q = db.create_queue("orders")
    q.put("before")
    with db.transaction() as tx:
        tx.enqueue("orders", "pending")
        tx.flush()  # written, as pending, before the purge
        assert q.purge("ready") == 1
        assert q.stats()["pending"] == 1
    m = q.get()
    assert m is not None
    assert m.body == "pending"
    m.ack()


def test_a_lane_purged_behind_its_held_head_takes_new_messages(db: sluice.Database) -> None:
    q = db.create_queue("orders", isolation="ordered")
    q.put_many(["a1", "a2", "a3"], group="a")
    q.put_many(["b1", "b2"], group="b")
    head = q.get()
    assert head is not None
    assert head.body == "a1"
    assert q.purge("ready") == 4  # b1 the head of its lane, the others waiting
    head.ack()
    assert q.get() is None
    q.put_many(["a4", "a5"], group="a")
    q.put("b3", group="b")
    taken = []
    while (m := q.get()) is not None:
        taken.append(m.body)
        m.ack()
    assert sorted(taken) == ["a4", "a5", "b3"]


def test_a_subscription_loses_its_backlog_a_topic_refuses(db: sluice.Database) -> None:
    topic = db.create_topic("events")
    sub = db.subscribe("events", "audit")
    topic.put_many([1, 2, 3])  # not yet taken into the subscription
    assert sub.purge("ready") == 3
    assert sub.get() is None
    assert sub.stats()["ready"] == 0
    topic.put(4)
    m = sub.get()
    assert m is not None
    assert m.body == 4
    m.ack()
    with pytest.raises(sluice.ConfigurationError, match="is a topic"):
        topic.purge("ready")


def test_refusals(db: sluice.Database) -> None:
    q = db.create_queue("orders")
    with pytest.raises(sluice.QueueNotFound):
        db.queue("nope").purge("ready")
    with pytest.raises(sluice.ConfigurationError, match="older_than is for kept"):
        q.purge("ready", older_than=10)
    with pytest.raises(sluice.ConfigurationError, match="ready, expired, failed or done"):
        q.purge("claimed")  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["sync"])
def test_a_purge_racing_consumers_never_takes_what_they_hold(shared_url: str, api: str) -> None:
    """Consumers (their own Database) take while another process's purge runs: every
    message is either taken, and still acknowledged by its holder, or purged."""
    total = 300
    with sluice.connect(shared_url) as consumers, sluice.connect(shared_url) as admin:
        q = consumers.create_queue("orders")
        q.put_many(range(total))
        started = threading.Event()
        held: list[list[sluice.Message]] = [[], []]

        def consume(mine: list[sluice.Message]) -> None:
            while (m := q.get()) is not None:
                mine.append(m)
                started.set()

        threads = [threading.Thread(target=consume, args=(mine,)) for mine in held]
        for t in threads:
            t.start()
        assert started.wait(30)
        purged = admin.queue("orders").purge("ready")
        for t in threads:
            t.join(60)
        taken = [m for mine in held for m in mine]
        assert len(taken) + purged == total
        assert len({m.id for m in taken}) == len(taken)
        for m in taken:
            m.ack()  # a deleted message would refuse: its lease lost
        counts = q.stats()
        assert (counts["ready"], counts["claimed"]) == (0, 0)
