"""A subscription's pull and claim in one round trip on PostgreSQL (``pull_claim``): a
consumer that keeps up with its topic sends both together, in one implicit transaction,
and gets what the two apart would give it."""

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
    """Counts the backend's pulls, claims and pull_claims, and those that merged the two."""

    def __init__(self, db: sluice.Database) -> None:
        backend = db.backend
        assert isinstance(backend, PostgresBackend)
        self.counts: Counter[str] = Counter()
        for name in ("pull", "claim", "pull_claim"):
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
    # Found nothing new: the merged call claims nothing, and the next take asks again.
    assert db.queue("s").get() is None
    assert calls.counts["merged"] == 21
    calls.reset()
    assert _keep_up(db, topic, 1, start=23) == [23]
    assert calls.counts["pull"] == 1


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


def test_a_merged_take_whose_answer_was_lost_gives_its_claim_back(
    url: str,
    proxy: LossyProxy,  # noqa: F811 (the fixture)
) -> None:
    # The server pulled and claimed, and the answer never came: the transaction's end
    # gives back the claim it never heard of, and the message is taken again in its place.
    with sluice.connect(f"{proxy.url(url)}&lease=600") as db, sluice.connect(url) as direct:
        topic = db.create_topic("t")
        db.subscribe("t", "lost_sub")
        assert _keep_up(db, topic, 2, name="lost_sub") == [0, 1]
        calls = _Calls(db)
        topic.put("unheard")
        tx = db.transaction()
        proxy.arm(b"lost_sub")
        with pytest.raises(ConnectionLost):
            tx.dequeue("lost_sub", limit=1)
        assert calls.counts["pull_claim"] == 1
        assert direct.queue("lost_sub").stats()["claimed"] == 1  # the server did claim
        tx.abort()
        assert direct.queue("lost_sub").stats()["claimed"] == 0
        with db.transaction() as again:
            taken = again.dequeue("lost_sub", limit=5)
        assert [(m.body, m.attempts) for m in taken] == [("unheard", 0)]
