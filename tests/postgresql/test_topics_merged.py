"""A subscription's pull and claim in one round trip on PostgreSQL (``pull_claim``): a
consumer that keeps up with its topic sends both together, in one implicit transaction,
and gets what the two apart would give it; one that does not asks whether its topic is
ahead inside the claim (claim_subscribed), which takes nothing if it is."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import sluice
from sluice.backends.postgres import PostgresBackend
from sluice.errors import ConnectionLost
from tests.lossy_proxy import LossyProxy
from tests.postgresql.test_lost_answers import proxy  # noqa: F401 (a fixture)


class _Calls:
    """Counts the backend's pulls, claims, pull_claims and guarded claims, and the
    pull_claims that claimed (merged: no pull or question apart)."""

    def __init__(self, db: sluice.Database) -> None:
        backend = db.backend
        assert isinstance(backend, PostgresBackend)
        self.counts: Counter[str] = Counter()
        for name in ("pull", "claim", "pull_claim", "_guarded_claim"):
            self._wrap(backend, name)

    def _wrap(self, backend: PostgresBackend, name: str) -> None:
        inner = getattr(backend, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            result = inner(*args, **kwargs)
            if name == "pull_claim" and result is not None:
                self.counts["merged"] += 1
            return result

        setattr(backend, name, counted)

    def reset(self) -> None:
        self.counts.clear()


@pytest.fixture
def db(url: str) -> Iterator[sluice.Database]:
    with sluice.connect(url) as database:
        yield database


def _keep_up(
    db: sluice.Database, topic: sluice.Queue, n: int, start: int = 0, name: str = "s"
) -> list[object]:
    """Publish one message and take it from subscription ``name``, n times (bodies from
    ``start``); the bodies taken."""
    got = []
    for i in range(start, start + n):
        topic.put(i)
        m = db.queue(name).get()
        assert m is not None
        got.append(m.body)
        m.ack()
    return got


def test_a_consumer_that_keeps_up_pulls_and_claims_in_one_call(db: sluice.Database) -> None:
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    calls = _Calls(db)
    assert _keep_up(db, topic, 3) == [0, 1, 2]
    # The first take asks and pulls apart; from then on each take is one merged call.
    calls.reset()
    assert _keep_up(db, topic, 20, start=3) == list(range(3, 23))
    assert calls.counts == Counter({"pull_claim": 20, "merged": 20})
    # Found nothing new: the merged call claims nothing, and the next take's claim asks
    # (guarded): it finds the topic ahead and takes nothing, then pulls and claims merged.
    assert db.queue("s").get() is None
    assert calls.counts["merged"] == 21
    calls.reset()
    assert _keep_up(db, topic, 1, start=23) == [23]
    assert calls.counts["pull"] == 0
    assert calls.counts["_guarded_claim"] == 1
    assert calls.counts["merged"] == 2  # the outer pull_claim and the merged one within


def test_a_merged_take_of_a_batch_takes_the_pulled_messages_in_order(
    db: sluice.Database,
) -> None:
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    _keep_up(db, topic, 2)
    topic.put_many(list(range(10)))
    calls = _Calls(db)
    with db.transaction() as tx:
        assert [m.body for m in tx.dequeue("s", limit=4)] == [0, 1, 2, 3]
    assert calls.counts == Counter({"pull_claim": 1, "merged": 1})
    with db.transaction() as tx:  # fewer than half its window ready: it pulls again, merged
        assert [m.body for m in tx.dequeue("s", limit=10)] == [4, 5, 6, 7, 8, 9]
    assert calls.counts["merged"] == 2


def test_a_group_met_by_a_merged_take_is_pulled_where_its_lane_is_promoted(
    db: sluice.Database,
) -> None:
    # The merged pull refuses a grouped message (it could not promote its lane before the
    # claim): the pull is made again in a transaction of its own, and the group's order
    # and one-at-a-time delivery hold.
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    _keep_up(db, topic, 2)
    topic.put("g1", group="g")
    topic.put("g2", group="g")
    topic.put("plain")
    calls = _Calls(db)
    holder = db.transaction()
    assert [m.body for m in holder.dequeue("s", limit=1)] == ["g1"]
    assert calls.counts["merged"] == 1
    assert calls.counts["pull"] == 1  # the refused pull, made again
    with db.transaction() as other:  # g2 waits behind g1, which the holder has
        assert [m.body for m in other.dequeue("s", limit=5)] == ["plain"]
    holder.commit()
    with db.transaction() as tx:
        assert [m.body for m in tx.dequeue("s", limit=5)] == ["g2"]
    assert db.queue("s").stats()["ready"] == 0


def test_consumers_that_keep_up_take_every_message_once(db: sluice.Database) -> None:
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    calls = _Calls(db)
    taken: list[object] = []
    lock = threading.Lock()
    published, done = threading.Event(), threading.Event()

    def consume() -> None:
        while not done.is_set():
            with db.transaction() as tx:
                got = [m.body for m in tx.dequeue("s", limit=1, wait=0.05)]
            with lock:
                taken.extend(got)
            if published.is_set() and not got and db.queue("s").stats()["ready"] == 0:
                done.set()

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(300):
        topic.put(i)
    published.set()
    for t in threads:
        t.join(60)
    assert sorted(taken) == list(range(300))  # type: ignore[type-var]
    assert calls.counts["merged"] > 0
    assert db.subscriptions()[0].lag == 0


@pytest.mark.parametrize("way", ["merged", "guarded"])
def test_a_take_whose_answer_was_lost_gives_its_claim_back(
    url: str,
    proxy: LossyProxy,  # noqa: F811 (the fixture)
    way: str,
) -> None:
    # The server claimed (merged: pulled too), and the answer never came: the
    # transaction's end gives back the claim it never heard of, and the message is taken
    # again in its place. Merged: the subscription keeps up and "unheard" is in the topic;
    # guarded: it does not, and "unheard" is pulled already.
    name = f"lost_{way}"
    with sluice.connect(f"{proxy.url(url)}&lease=600") as db, sluice.connect(url) as direct:
        topic = db.create_topic("t")
        db.subscribe("t", name)
        if way == "merged":
            assert _keep_up(db, topic, 2, name=name) == [0, 1]
            topic.put("unheard")
        else:
            topic.put_many(["a", "b", "unheard"])
            assert [_take(db, name), _take(db, name)] == ["a", "b"]
        calls = _Calls(db)
        tx = db.transaction()
        proxy.arm(name.encode())
        with pytest.raises(ConnectionLost):
            tx.dequeue(name, limit=1)
        assert calls.counts["pull_claim" if way == "merged" else "_guarded_claim"] == 1
        assert calls.counts["merged"] == 0
        assert calls.counts["pull"] == 0
        assert direct.queue(name).stats()["claimed"] == 1  # the server did claim
        tx.abort()
        assert direct.queue(name).stats()["claimed"] == 0
        with db.transaction() as again:
            taken = again.dequeue(name, limit=5)
        assert [(m.body, m.attempts) for m in taken] == [("unheard", 0)]


def _take(db: sluice.Database, name: str = "s") -> object:
    """Take one message from subscription ``name`` and acknowledge it; its body."""
    m = db.queue(name).get()
    assert m is not None
    m.ack()
    return m.body


def test_a_take_with_nothing_new_in_the_topic_asks_inside_its_claim(
    db: sluice.Database,
) -> None:
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    topic.put_many(list(range(10)))
    calls = _Calls(db)
    # The first take's claim finds the topic ahead: pulled and claimed merged; the second
    # pulls nothing more (merged), and the subscription no longer keeps up.
    assert [_take(db), _take(db)] == [0, 1]
    calls.reset()
    assert [_take(db) for _ in range(8)] == list(range(2, 10))
    # Each take one guarded claim: no question, no pull, no claim apart.
    assert calls.counts == Counter({"pull_claim": 8, "_guarded_claim": 8, "merged": 8})
    assert db.queue("s").get() is None


def test_a_message_published_after_a_guarded_take_is_taken_in_priority_order(
    db: sluice.Database,
) -> None:
    # The guard, not a question before the claim, keeps docs/topics.md's promise: within
    # what a subscription has taken (its window not full), priority order holds.
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    topic.put_many(["a", "b", "c"])
    assert [_take(db), _take(db)] == ["a", "b"]  # pulled all three; no longer keeping up
    topic.put("urgent", priority=9)
    calls = _Calls(db)
    assert [_take(db), _take(db)] == ["urgent", "c"]
    # The guarded claim found the topic ahead and took nothing; the merged pull and claim
    # after it took "urgent" (and kept up: "c" came by a merged take as well).
    assert calls.counts["_guarded_claim"] == 1
    assert calls.counts["pull"] == 0


def test_a_guarded_take_of_a_subscription_dropped_elsewhere_says_it_is_gone(
    db: sluice.Database, url: str
) -> None:
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    topic.put_many(["a", "b"])
    assert [_take(db), _take(db)] == ["a", "b"]
    with sluice.connect(url) as other:
        other.unsubscribe("s")
    with pytest.raises(sluice.QueueNotFound, match=r"'s' does not exist.*unsubscribed"):
        db.queue("s").get()


def test_guarded_takes_mark_their_subscription_used(db: sluice.Database) -> None:
    # The question a take used to ask marked the subscription used every TOUCH_EVERY
    # seconds; the guarded claim that replaces it must, or expire_after drops a
    # subscription whose consumer polls it.
    clock = sluice.ManualClock(1_000_000.0)
    db.clock = clock
    topic = db.create_topic("t")
    db.subscribe("t", "polled", expire_after=60)
    topic.put_many(["a", "b"])
    assert [_take(db, "polled"), _take(db, "polled")] == ["a", "b"]
    calls = _Calls(db)
    for _ in range(6):
        clock.advance(20)
        assert db.queue("polled").get() is None
        db.recover()
    assert calls.counts["pull"] == 0
    assert [s.name for s in db.subscriptions()] == ["polled"]
