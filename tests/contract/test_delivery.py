"""Qpid's delivery semantics on every backend: priority levels and credit (docs/delivery.md)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice.catalog import priority_level

from .aio_facade import both_apis  # noqa: F401 (the fixture: every test over both APIs)

# --- priority levels -------------------------------------------------------------------

# Qpid's mapping of AMQP 0-10/JMS priorities 0-9 onto N levels, written out (not computed):
# a row per number of levels, the level of priority 0, 1, ..., 9.
LEVELS = {
    1: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    2: [0, 0, 0, 0, 0, 1, 1, 1, 1, 1],
    3: [0, 0, 0, 0, 1, 2, 2, 2, 2, 2],
    4: [0, 0, 0, 0, 1, 2, 3, 3, 3, 3],
    5: [0, 0, 0, 1, 2, 3, 4, 4, 4, 4],
    10: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
}
OUT_OF_RANGE = [-(2**63), -1, 10, 11, 2**63 - 1]


@pytest.mark.parametrize("levels", sorted(LEVELS))
def test_the_mapping_table(db: sluice.Database, levels: int) -> None:
    q = db.create_queue("leveled", priority_levels=levels)
    for priority in [*range(10), *OUT_OF_RANGE]:
        q.put(priority, priority=priority)
    stored = {m.body: m.priority for m in q.browse(limit=100)}
    assert [stored[p] for p in range(10)] == LEVELS[levels]
    assert [priority_level(p, levels) for p in range(10)] == LEVELS[levels]
    # Below 0: the lowest level; above 9: the highest.
    assert stored[-(2**63)] == stored[-1] == 0
    assert stored[10] == stored[11] == stored[2**63 - 1] == levels - 1


def test_fifo_within_a_level_highest_level_first(db: sluice.Database) -> None:
    q = db.create_queue("leveled", priority_levels=2)  # 0-4 and 5-9
    for body, priority in [("a", 0), ("b", 9), ("c", 3), ("d", 5), ("e", 4), ("f", 7)]:
        q.put(body, priority=priority)
    taken = [_take(q) for _ in range(6)]
    assert taken == ["b", "d", "f", "a", "c", "e"]
    assert q.get() is None


def test_without_levels_priorities_stay_as_given(db: sluice.Database) -> None:
    q = db.create_queue("plain")
    for body, priority in [("a", 0), ("b", 9), ("c", 3), ("d", 5), ("e", 12)]:
        q.put(body, priority=priority)
    assert [(m.body, m.priority) for m in q.browse()] == [
        ("e", 12),
        ("b", 9),
        ("d", 5),
        ("c", 3),
        ("a", 0),
    ]


def test_every_enqueue_path_maps(db: sluice.Database) -> None:
    db.create_type("urgent", schema={"type": "object"})
    q = db.create_queue("leveled", priority_levels=3, priority={"*": "body.urgency"})  # 0-3, 4, 5-9
    q.put({"urgency": 0, "via": "put"}, priority=9)
    q.put_many([{"urgency": 0, "via": "put_many"}], priority=4)
    with db.transaction() as tx:
        tx.enqueue("leveled", {"urgency": 0, "via": "tx.enqueue"}, priority=1)
        tx.enqueue_many("leveled", [{"urgency": 0, "via": "enqueue_many"}], priority=6)
        tx.enqueue("leveled", {"urgency": 4, "via": "function"})  # the priority function's
        tx.enqueue("leveled", {"urgency": 8.6, "via": "function high"})
        tx.enqueue("leveled", {"via": "typed"}, type="urgent", priority=5)
    found = {m.body["via"]: m.priority for m in q.browse()}
    assert found == {
        "put": 2,
        "put_many": 1,
        "tx.enqueue": 0,
        "enqueue_many": 2,
        "function": 1,
        "function high": 2,
        "typed": 2,
    }


def test_declared_properties_and_selections_see_the_level(db: sluice.Database) -> None:
    q = db.create_queue("leveled", priority_levels=2)
    db.create_property("urgent", "priority >= 1", queues=["leveled"], type="boolean")
    q.put("low", priority=3)
    q.put("high", priority=8)
    assert [m.body for m in q.browse(where="urgent")] == ["high"]
    assert [m.body for m in q.browse(where="priority = 1")] == ["high"]


def test_a_released_message_returns_to_its_place_within_its_level(db: sluice.Database) -> None:
    q = db.create_queue("leveled", priority_levels=2)
    for body, priority in [("low1", 1), ("high1", 6), ("low2", 2), ("high2", 9), ("high3", 5)]:
        q.put(body, priority=priority)
    first, second = q.get(), q.get()
    assert first is not None
    assert second is not None
    assert (first.body, second.body) == ("high1", "high2")
    second.release()
    first.release()
    assert [_take(q) for _ in range(5)] == ["high1", "high2", "high3", "low1", "low2"]
    # Aborting puts them back in place too.
    for body, priority in [("low", 0), ("high", 9), ("high again", 7)]:
        q.put(body, priority=priority)
    with db.transaction() as tx:
        assert [m.body for m in tx.dequeue("leveled", limit=2)] == ["high", "high again"]
        tx.abort()
    assert [m.body for m in q.browse()] == ["high", "high again", "low"]


def test_altering_the_levels_affects_new_messages_only(db: sluice.Database) -> None:
    q = db.create_queue("q")
    q.put("before", priority=9)
    assert db.alter_queue("q", priority_levels=2).priority_levels == 2
    q.put("after", priority=9)
    assert [(m.body, m.priority) for m in q.browse()] == [("before", 9), ("after", 1)]
    db.alter_queue("q", priority_levels=None)
    q.put("unleveled", priority=7)
    assert [m.body for m in q.browse()] == ["before", "unleveled", "after"]


def test_a_topic_with_levels_delivers_to_its_subscriptions_in_level_order(
    db: sluice.Database,
) -> None:
    topic = db.create_topic("news", priority_levels=3)  # 0-3, 4, 5-9
    db.subscribe("news", "reader")
    assert db.queue("reader").spec.priority_levels == 3
    for body, priority in [("a", 2), ("b", 4), ("c", 9), ("d", 0), ("e", 5), ("f", 4)]:
        topic.put(body, priority=priority)
    reader = db.queue("reader")
    assert [_take(reader) for _ in range(6)] == ["c", "e", "b", "f", "a", "d"]
    assert reader.get() is None


@pytest.mark.parametrize("levels", [0, 11, -1, "3", True, 2.0])
def test_bad_priority_levels_are_refused_and_nothing_is_created(
    db: sluice.Database, levels: Any
) -> None:
    with pytest.raises(sluice.ConfigurationError, match="priority_levels"):
        db.create_queue("q", priority_levels=levels)
    with pytest.raises(sluice.ConfigurationError, match="priority_levels"):
        db.create_topic("t", priority_levels=levels)
    assert db.queues() == []
    db.create_queue("q", priority_levels=4)
    with pytest.raises(sluice.ConfigurationError, match="priority_levels"):
        db.alter_queue("q", priority_levels=levels)
    assert db.queue("q").spec.priority_levels == 4


def test_the_cli_puts_into_levels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sluice import cli

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    argv = ["--db", url]
    assert cli.main(["create", "q", "--priority-levels", "2", "--max-in-flight", "5", *argv]) == 0
    assert cli.main(["put", "q", "x", "--priority", "8", *argv]) == 0
    with sluice.connect(url) as db:
        spec = db.queue("q").spec
        assert (spec.priority_levels, spec.max_in_flight) == (2, 5)
        assert [m.priority for m in db.queue("q").browse()] == [1]
    capsys.readouterr()


# --- credit: max_in_flight --------------------------------------------------------------


def test_at_the_cap_nothing_more_until_a_message_is_settled(db: sluice.Database) -> None:
    q = db.create_queue("capped", max_in_flight=2)
    q.put_many([f"m{n}" for n in range(6)])
    first, second = q.get(), q.get()
    assert first is not None
    assert second is not None
    assert q.get() is None
    assert q.stats()["ready"] == 4  # waiting for credit, not gone
    first.ack()
    third = q.get()
    assert third is not None
    assert third.body == "m2"
    assert q.get() is None
    second.release()  # back to its place: the next one taken
    again = q.get()
    assert again is not None
    assert again.body == "m1"
    assert q.get() is None
    again.reject("no")
    fourth = q.get()
    assert fourth is not None
    assert fourth.body == "m3"
    third.ack()
    fourth.ack()
    with db.transaction() as tx:
        assert [m.body for m in tx.dequeue("capped", limit=5)] == ["m4", "m5"]
        assert q.get() is None
        tx.abort()  # an abort frees the credit too
    assert [_take(q), _take(q)] == ["m4", "m5"]


def test_a_batch_takes_no_more_than_the_credit(db: sluice.Database) -> None:
    q = db.create_queue("capped", max_in_flight=3)
    q.put_many([{"n": n} for n in range(10)])
    with db.transaction() as tx:
        assert [m.body["n"] for m in tx.dequeue("capped", limit=10)] == [0, 1, 2]
        assert tx.dequeue("capped", limit=10) == []
    # Selective and ordering dequeues, grouped messages: the same cap.
    with db.transaction() as tx:
        taken = tx.dequeue("capped", limit=10, where="body.n >= 5", order_by=["body.n DESC"])
        assert sorted(m.body["n"] for m in taken) == [7, 8, 9]
    q.put_many([{"g": n} for n in range(4)], group="g")
    with db.transaction() as tx:
        taken = tx.dequeue("capped", limit=10, where="body.g IS NOT NULL")
        assert [m.body["g"] for m in taken] == [0, 1, 2]


def test_two_transactions_never_exceed_the_cap_together(db: sluice.Database) -> None:
    q = db.create_queue("capped", max_in_flight=3)
    q.put_many(list(range(10)))
    t1, t2, t3 = db.begin(), db.begin(), db.begin()
    assert len(t1.dequeue("capped", limit=2)) == 2
    assert len(t2.dequeue("capped", limit=5)) == 1
    assert t3.dequeue("capped", limit=5) == []
    assert q.stats()["claimed"] == 3
    t1.commit()
    assert len(t3.dequeue("capped", limit=5)) == 2
    assert t2.dequeue("capped") == []
    t2.abort()
    t3.commit()
    assert len(db.begin().dequeue("capped", limit=10)) == 3


def test_a_transactions_own_enqueues_count_once_taken(db: sluice.Database) -> None:
    db.create_queue("capped", max_in_flight=2)
    with db.transaction() as tx:
        tx.enqueue("capped", "own 1")
        tx.enqueue("capped", "own 2")
        tx.enqueue("capped", "own 3")
        assert [m.body for m in tx.dequeue("capped", limit=5)] == ["own 1", "own 2"]


def test_a_waiting_consumer_is_woken_when_a_settle_frees_credit(db: sluice.Database) -> None:
    q = db.create_queue("capped", max_in_flight=1)
    q.put_many(["first", "second"])
    held = q.get()
    assert held is not None
    got: list[Any] = []
    waiting = _when_waiting(db)
    consumer = threading.Thread(target=lambda: got.append(q.get(wait=60)))
    consumer.start()
    assert waiting.wait(10)  # it found no credit and waits
    held.ack()
    consumer.join(10)
    assert not consumer.is_alive(), "a settle did not wake the consumer waiting for credit"
    assert got[0] is not None
    assert got[0].body == "second"
    got[0].ack()


def test_a_subscription_with_max_in_flight(db: sluice.Database) -> None:
    topic = db.create_topic("news")
    db.subscribe("news", "capped", max_in_flight=2)
    db.subscribe("news", "free")
    topic.put_many([f"n{n}" for n in range(5)])
    capped, free = db.queue("capped"), db.queue("free")
    a, b = capped.get(), capped.get()
    assert a is not None
    assert b is not None
    assert capped.get() is None
    assert [_take(free) for _ in range(5)] == [f"n{n}" for n in range(5)]  # not held back
    a.ack()
    assert _take(capped) == "n2"
    with pytest.raises(sluice.ConfigurationError, match="max_in_flight"):
        db.alter_queue("news", max_in_flight=2)  # a topic is not consumed itself


def test_altering_the_cap_applies_to_the_next_claim(db: sluice.Database) -> None:
    q = db.create_queue("q")
    q.put_many(list(range(6)))
    db.alter_queue("q", max_in_flight=1)
    held = q.get()
    assert held is not None
    assert q.get() is None
    db.alter_queue("q", max_in_flight=None)
    assert q.get() is not None


@pytest.mark.parametrize("cap", [0, -1, 2**31, "5", True, 1.0])
def test_bad_max_in_flight_is_refused_and_nothing_is_created(db: sluice.Database, cap: Any) -> None:
    with pytest.raises(sluice.ConfigurationError, match="max_in_flight"):
        db.create_queue("q", max_in_flight=cap)
    db.create_topic("news")
    with pytest.raises(sluice.ConfigurationError, match="max_in_flight"):
        db.subscribe("news", "s", max_in_flight=cap)
    assert [s.name for s in db.queues()] == ["news"]
    db.create_queue("q", max_in_flight=3)
    with pytest.raises(sluice.ConfigurationError, match="max_in_flight"):
        db.alter_queue("q", max_in_flight=cap)
    assert db.queue("q").spec.max_in_flight == 3
    with pytest.raises(sluice.ConfigurationError, match="max_in_flight"):
        db.queue("q", max_in_flight=cap)


def test_stream_rounds_take_no_more_than_the_credit(db: sluice.Database) -> None:
    pytest.importorskip("pyarrow")  # PostgreSQL's rounds are spooled as Arrow
    q = db.create_queue("capped", max_in_flight=3)
    q.put_many(list(range(10)))
    held = q.get()
    assert held is not None
    stream = db.backend.open_stream("capped", "s")
    assert db.backend.stream_claim(stream.session, 1, "capped", 100, None) == 2
    assert db.backend.stream_claim(stream.session, 2, "capped", 100, None) == 0
    assert q.get() is None  # what a stream holds counts against the credit
    held.ack()
    assert db.backend.stream_claim(stream.session, 3, "capped", 100, None) == 1
    db.backend.stream_settle(stream.session, "capped", 0, 3)
    assert q.get() is not None


def test_a_claim_in_the_callers_transaction_holds_the_credit_until_it_ends(
    db: sluice.Database,
) -> None:
    if db.backend.dialect != "postgresql":
        pytest.skip("a queue transaction in the caller's own transaction is PostgreSQL's")
    import psycopg

    q = db.create_queue("capped", max_in_flight=2)
    q.put_many(list(range(5)))
    conninfo = db.backend.conninfo  # type: ignore[attr-defined]
    with psycopg.connect(conninfo) as business, psycopg.connect(conninfo) as admin:
        tx = db.begin(connection=business)
        assert [m.body for m in tx.dequeue("capped", limit=5)] == [0, 1]
        got: list[Any] = []
        other = threading.Thread(target=lambda: got.append(q.get()))
        other.start()
        # The other claimer waits for the queue's credit lock (it would take message 2
        # at once, and hold three, if it did not).
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        for _ in range(1000):
            if admin.execute(waiting).fetchone() != (0,):
                break
            admin.commit()
            other.join(0.01)
        assert other.is_alive(), got
        tx.commit()
        business.commit()  # the two are settled: credit for the other claimer
        other.join(10)
        assert got[0] is not None
        assert got[0].body == 2
        got[0].ack()


# --- a consumer's own credit ------------------------------------------------------------


def test_a_handle_with_its_own_credit(db: sluice.Database) -> None:
    db.create_queue("q").put_many([f"m{n}" for n in range(6)])
    mine = db.queue("q", max_in_flight=2)
    assert (mine.max_in_flight, mine.in_flight) == (2, 0)
    first, second = mine.get(), mine.get()
    assert first is not None
    assert second is not None
    assert mine.in_flight == 2
    assert mine.get() is None
    other = db.queue("q")  # the queue itself has no cap: other consumers go on
    assert _take(other) == "m2"
    first.ack()
    third = mine.get()
    assert third is not None
    assert third.body == "m3"
    assert mine.get() is None
    second.release()
    fourth = mine.get()
    assert fourth is not None
    assert fourth.body == "m1"
    fourth.reject("no")
    third.ack()
    assert mine.in_flight == 0
    assert mine.get(where="body = 'nothing'") is None  # an empty get gives its credit back
    assert mine.in_flight == 0


def test_a_handle_waits_for_its_own_credit(db: sluice.Database) -> None:
    db.create_queue("q").put_many(["first", "second"])
    mine = db.queue("q", max_in_flight=1)
    held = mine.get()
    assert held is not None
    got: list[Any] = []
    consumer = threading.Thread(target=lambda: got.append(mine.get(wait=60)))
    consumer.start()
    held.ack()
    consumer.join(10)
    assert not consumer.is_alive(), "a settle did not free the handle's credit"
    assert got[0] is not None
    assert got[0].body == "second"
    got[0].ack()
    assert mine.get(wait=0.01) is None
    assert mine.in_flight == 0


def test_a_handles_credit_is_shared_by_its_threads(db: sluice.Database) -> None:
    db.create_queue("q").put_many(list(range(20)))
    mine = db.queue("q", max_in_flight=3)
    taken: list[sluice.Message] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(5):
            m = mine.get()
            if m is not None:
                with lock:
                    taken.append(m)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(taken) == 3
    assert mine.in_flight == 3
    for m in taken:
        m.ack()
    assert mine.in_flight == 0


def test_a_handle_and_the_queue_cap_both_apply(db: sluice.Database) -> None:
    db.create_queue("capped", max_in_flight=2).put_many(list(range(5)))
    mine = db.queue("capped", max_in_flight=5)
    a, b = mine.get(), mine.get()
    assert a is not None
    assert b is not None
    assert mine.get() is None
    assert mine.in_flight == 2
    a.ack()
    b.ack()


def test_a_handle_of_a_missing_queue(db: sluice.Database) -> None:
    with pytest.raises(sluice.QueueNotFound):
        db.queue("missing", max_in_flight=1)


# --- helpers -----------------------------------------------------------------------------


def _take(q: sluice.Queue) -> Any:
    m = q.get()
    assert m is not None
    m.ack()
    return m.body


def _when_waiting(db: sluice.Database) -> threading.Event:
    """An event set when a consumer of ``db`` starts to wait for news."""
    wakeups = db.context.wakeups
    original: Callable[..., None] = wakeups.wait
    original_async: Callable[..., Awaitable[None]] = wakeups.wait_async
    waiting = threading.Event()

    def wait(*args: Any, **kwargs: Any) -> None:
        waiting.set()
        original(*args, **kwargs)

    async def wait_async(*args: Any, **kwargs: Any) -> None:  # sluice.aio's consumers
        waiting.set()
        await original_async(*args, **kwargs)

    wakeups.wait = wait  # type: ignore[method-assign]
    wakeups.wait_async = wait_async  # type: ignore[method-assign]
    return waiting
