"""Topics and subscriptions: the behaviour every backend must show (docs/topics.md)."""

from __future__ import annotations

import threading

import pytest

import sluice
from sluice import ManualClock, Position


def drain(db: sluice.Database, name: str, limit: int = 100) -> list[object]:
    """Every message a subscription has now, taken and acknowledged in one transaction."""
    with db.transaction() as tx:
        return [m.body for m in tx.dequeue(name, limit=limit)]


@pytest.fixture
def topic(db: sluice.Database) -> sluice.Queue:
    return db.create_topic("events")


def test_every_subscription_receives_every_message_once_in_order(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    names = [f"s{i}" for i in range(5)]
    for name in names:
        db.subscribe("events", name)
    topic.put_many([{"n": n} for n in range(20)])
    for name in names:
        assert drain(db, name) == [{"n": n} for n in range(20)]
        assert drain(db, name) == []


def test_selector_decides_what_a_subscription_receives(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "big", where="body.total >= 100")
    db.subscribe("events", "eu", where="props.region = 'eu'")
    db.subscribe("events", "all", where="")  # an empty selector receives everything
    for n in range(10):
        topic.put({"n": n, "total": n * 25}, properties={"region": "eu" if n % 2 else "us"})
    assert drain(db, "big") == [{"n": n, "total": n * 25} for n in range(4, 10)]
    assert [b["n"] for b in drain(db, "eu")] == [1, 3, 5, 7, 9]  # type: ignore[index]
    assert len(drain(db, "all")) == 10


def test_a_late_subscription_receives_what_is_published_after_it(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "early")
    topic.put("before")
    db.subscribe("events", "late")
    topic.put("after")
    assert drain(db, "early") == ["before", "after"]
    assert drain(db, "late") == ["after"]


def test_a_subscription_may_start_from_a_position_the_topic_still_keeps(
    db: sluice.Database,
) -> None:
    topic = db.create_topic("log", retention="forever")
    topic.put_many(["a", "b", "c"])
    stored = topic.browse()
    assert [m.body for m in stored] == ["a", "b", "c"]
    db.subscribe("log", "from-b", start=stored[0].position)
    db.subscribe("log", "from-start", start="first")
    db.subscribe("log", "from-now")
    topic.put("d")
    assert drain(db, "from-b") == ["b", "c", "d"]
    assert drain(db, "from-start") == ["a", "b", "c", "d"]
    assert drain(db, "from-now") == ["d"]


def test_release_and_abort_return_a_message_to_its_place_in_that_subscription_only(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "a")
    db.subscribe("events", "b")
    topic.put_many([1, 2, 3])
    first = db.queue("a").get()
    assert first is not None
    assert first.body == 1
    first.release()
    with pytest.raises(RuntimeError), db.transaction() as tx:
        assert [m.body for m in tx.dequeue("a", limit=2)] == [1, 2]
        raise RuntimeError("abort")
    again = db.queue("a").get()
    assert again is not None
    assert (again.body, again.attempts) == (1, 2)
    again.ack()
    assert drain(db, "a") == [2, 3]
    assert drain(db, "b") == [1, 2, 3]


def test_a_stopped_subscription_holds_back_no_other(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "stopped")
    db.subscribe("events", "busy")
    for n in range(30):
        topic.put(n)
        assert drain(db, "busy") == [n]
    stats = db.queue("stopped").stats()
    assert stats["ready"] == 30
    (stopped,) = [s for s in db.subscriptions("events") if s.name == "stopped"]
    assert stopped.lag == 30
    assert stopped.oldest is not None
    assert drain(db, "stopped") == list(range(30))


def test_a_message_is_removed_once_every_subscription_has_settled_it(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "a")
    db.subscribe("events", "b")
    topic.put_many(list(range(5)))
    assert drain(db, "a") == list(range(5))
    db.recover()  # upkeep collects
    assert topic.stats()["ready"] == 5  # b has not taken them yet
    assert drain(db, "b") == list(range(5))
    db.recover()
    assert topic.stats()["ready"] == 0
    assert db.queue("a").stats()["ready"] == db.queue("b").stats()["ready"] == 0


def test_a_topic_without_subscriptions_keeps_nothing_unless_retained(db: sluice.Database) -> None:
    plain = db.create_topic("plain")
    kept = db.create_topic("kept", retention=3600)
    plain.put("lost")
    kept.put("kept")
    db.recover()
    assert plain.stats()["ready"] == 0
    assert kept.stats()["ready"] == 1


def test_publish_and_consume_in_one_transaction_with_queues(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "audit")
    db.create_queue("work")
    with pytest.raises(RuntimeError), db.transaction() as tx:
        tx.enqueue("events", "rolled back")
        tx.enqueue("work", "rolled back")
        raise RuntimeError("abort")
    assert drain(db, "audit") == []
    topic.put("first")
    with db.transaction() as tx:
        (m,) = tx.dequeue("audit")
        tx.enqueue("work", {"from": m.body})
        tx.enqueue("events", "second")
    assert drain(db, "work") == [{"from": "first"}]
    assert drain(db, "audit") == ["second"]


def test_a_subscription_has_its_own_attempts_and_error_queue(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "fragile", max_attempts=2, error_queue="fragile.errors")
    db.subscribe("events", "sturdy")
    topic.put("poison")
    for _ in range(2):
        m = db.queue("fragile").get()
        assert m is not None
        m.release()
    assert db.queue("fragile").get() is None
    (dead,) = db.queue("fragile.errors").browse()
    assert (dead.body, dead.origin_queue) == ("poison", "fragile")
    m = db.queue("sturdy").get()
    assert m is not None
    assert m.attempts == 0
    m.reject("no")
    assert db.queue("sturdy").stats()["failed"] == 1


def test_a_small_window_still_delivers_everything_in_order(db: sluice.Database) -> None:
    topic = db.create_topic("t")
    db.subscribe("t", "narrow", window=2)
    topic.put_many(list(range(7)))
    assert db.queue("narrow").stats()["ready"] == 7
    got = []
    while (m := db.queue("narrow").get()) is not None:
        got.append(m.body)
        m.ack()
    assert got == list(range(7))


def _take_all(queue: sluice.Queue) -> list[object]:
    got = []
    while (m := queue.get()) is not None:
        got.append(m.body)
        m.ack()
    return got


def test_what_is_published_after_a_pull_follows_what_it_took(db: sluice.Database) -> None:
    # The first get pulls everything the topic has; what is published after that pull
    # follows what it brought, in the topic's order.
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    topic.put_many([0, 1, 2])
    first = db.queue("s").get()
    assert first is not None
    assert first.body == 0
    first.ack()
    topic.put_many([3, 4])
    assert _take_all(db.queue("s")) == [1, 2, 3, 4]
    topic.put(5)
    assert _take_all(db.queue("s")) == [5]


def test_news_at_any_priority_is_found_past_the_pointer(db: sluice.Database) -> None:
    # Whether the topic has anything past a subscription's pointer is looked up one
    # priority at a time: a message at a priority the topic had not held is found too.
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    topic.put("first", priority=5)
    assert _take_all(db.queue("s")) == ["first"]
    topic.put("low", priority=-3)
    assert _take_all(db.queue("s")) == ["low"]
    topic.put("lower", priority=-7)
    topic.put("high", priority=9)
    assert _take_all(db.queue("s")) == ["high", "lower"]


def test_a_grouped_message_waiting_in_its_topic_is_found_past_the_pointer(
    db: sluice.Database,
) -> None:
    # The second message of a group waits behind the first in the topic (its lane):
    # the look past the pointer finds waiting messages as well as ready ones.
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    topic.put("g1", group="g")
    assert _take_all(db.queue("s")) == ["g1"]
    topic.put("g2", group="g")
    assert _take_all(db.queue("s")) == ["g2"]


def test_a_consumer_that_keeps_up_meets_an_unsubscribe_and_a_new_namesake(
    db: sluice.Database,
) -> None:
    # Taking each message as it is published, the consumer finds its topic ahead at every
    # take (on PostgreSQL its pulls then skip the question before them). Unsubscribed, its
    # next take says so; a new subscription of the same name, to another topic, receives
    # that topic's messages only.
    topic = db.create_topic("t")
    db.subscribe("t", "s")

    def take_one() -> object:
        m = db.queue("s").get()
        assert m is not None
        m.ack()
        return m.body

    for n in range(5):
        topic.put(n)
        assert take_one() == n  # the pull before it found the topic one ahead
    db.unsubscribe("s")
    topic.put(5)
    with pytest.raises(sluice.QueueNotFound, match="'s' does not exist"):
        db.queue("s").get()
    other = db.create_topic("u")
    db.subscribe("u", "s")
    topic.put(6)
    other.put("u0")
    assert take_one() == "u0"
    other.put("u1")
    assert take_one() == "u1"
    assert _take_all(db.queue("s")) == []


def test_a_consumer_whose_ready_messages_another_took_asks_the_topic(
    backend_url: str, db: sluice.Database
) -> None:
    # This Database pulled three and reckons two still ready; another Database takes
    # them, and new ones are published: the next get finds none where it reckoned two,
    # and asks the topic rather than answering None.
    if backend_url == "memory://":
        pytest.skip("a memory database is not shared with another Database")
    topic = db.create_topic("t")
    db.subscribe("t", "s")
    topic.put_many([0, 1, 2])
    first = db.queue("s").get()
    assert first is not None
    first.ack()
    with sluice.connect(backend_url) as other:
        assert _take_all(other.queue("s")) == [1, 2]
        other.queue("t").put_many([3, 4])
    assert _take_all(db.queue("s")) == [3, 4]


def test_selective_and_ordering_dequeue_on_a_subscription_see_its_whole_backlog(
    db: sluice.Database,
) -> None:
    topic = db.create_topic("t")
    db.subscribe("t", "s", window=2)
    topic.put_many([{"n": n} for n in range(10)])
    with db.transaction() as tx:
        (m,) = tx.dequeue("s", where="body.n = 8")
        assert m.body == {"n": 8}
        top = tx.dequeue("s", order_by=["body.n DESC"], limit=2)
        assert [x.body["n"] for x in top] == [9, 7]


def test_a_waiting_consumer_is_woken_by_a_publish(db: sluice.Database, topic: sluice.Queue) -> None:
    db.subscribe("events", "waiter")
    taken: list[object] = []
    started = threading.Event()

    def consume() -> None:
        started.set()
        m = db.queue("waiter").get(wait=30)
        if m is not None:
            taken.append(m.body)
            m.ack()

    thread = threading.Thread(target=consume)
    thread.start()
    started.wait()
    topic.put("news")
    thread.join(30)
    assert taken == ["news"]


def test_an_unused_subscription_expires(db: sluice.Database, topic: sluice.Queue) -> None:
    clock = ManualClock(1_000_000.0)
    db.clock = clock
    db.subscribe("events", "abandoned", expire_after=60)
    db.subscribe("events", "kept")
    topic.put("x")
    clock.advance(30)
    db.recover()
    assert db.queue("abandoned").stats()["ready"] == 1
    clock.advance(31)
    db.recover()
    assert [s.name for s in db.subscriptions()] == ["kept"]
    with pytest.raises(sluice.QueueNotFound):
        db.queue("abandoned").get()


def test_a_used_subscription_does_not_expire(db: sluice.Database, topic: sluice.Queue) -> None:
    clock = ManualClock(1_000_000.0)
    db.clock = clock
    db.subscribe("events", "polled", expire_after=60)
    for _ in range(5):
        clock.advance(40)
        assert db.queue("polled").get() is None
        db.recover()
    assert [s.name for s in db.subscriptions()] == ["polled"]


def test_unsubscribe_drops_it_and_frees_the_topic(db: sluice.Database, topic: sluice.Queue) -> None:
    db.subscribe("events", "gone")
    topic.put_many([1, 2])
    db.unsubscribe("gone")
    db.recover()
    assert topic.stats()["ready"] == 0
    with pytest.raises(sluice.QueueNotFound):
        db.queue("gone")
    db.drop_queue("events")


def test_browse_pages_by_position_in_delivery_order(db: sluice.Database) -> None:
    q = db.create_queue("paged")
    for n in range(10):
        q.put(n, priority=1 if n % 3 == 0 else 0)
    expected = [0, 3, 6, 9, 1, 2, 4, 5, 7, 8]
    pages, after = [], None
    while page := q.browse(limit=3, after=after):
        pages.append([m.body for m in page])
        after = page[-1].position
    assert [b for page in pages for b in page] == expected
    assert pages[0] == [0, 3, 6]
    text = str(after)
    assert Position.parse(text) == after
    assert q.browse(after=text) == []
    assert q.stats()["ready"] == 10  # nothing was taken


def test_browse_of_a_subscription_pages_through_its_backlog(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "s", window=2)
    topic.put_many(list(range(5)))
    first = db.queue("s").browse(limit=2)
    rest = db.queue("s").browse(after=first[-1].position)
    assert [m.body for m in first + rest] == list(range(5))
    assert drain(db, "s") == list(range(5))


def test_a_property_declared_on_a_topic_reaches_its_subscriptions(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "before")
    db.create_property("customer", "body.customer", queues=["events"])
    db.subscribe("events", "after", where="customer = 'Smith'")
    topic.put_many([{"customer": "Smith"}, {"customer": "Jones"}])
    with db.transaction() as tx:
        (m,) = tx.dequeue("before", where="customer = 'Jones'")
        assert m.body == {"customer": "Jones"}
    assert drain(db, "after") == [{"customer": "Smith"}]
    with pytest.raises(sluice.ConfigurationError, match="declare properties on its topic"):
        db.create_property("other", "body.x", queues=["after"])


# --- bad input: a clear error, nothing changed -------------------------------------------
def test_subscribing_to_what_is_not_a_topic_is_refused(db: sluice.Database) -> None:
    db.create_queue("plain")
    with pytest.raises(sluice.ConfigurationError, match="not a topic"):
        db.subscribe("plain", "s")
    with pytest.raises(sluice.QueueNotFound):
        db.subscribe("missing", "s")
    assert [q.name for q in db.queues()] == ["plain"]


def test_names_are_unique_across_queues_topics_and_subscriptions(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.create_queue("taken")
    db.subscribe("events", "sub")
    with pytest.raises(sluice.QueueExists):
        db.subscribe("events", "taken")
    with pytest.raises(sluice.QueueExists):
        db.subscribe("events", "sub")
    with pytest.raises(sluice.QueueExists):
        db.create_queue("sub")
    with pytest.raises(sluice.QueueExists, match="as a topic"):
        db.create_queue("events", exist_ok=True)
    db.subscribe("events", "sub", exist_ok=True)
    assert sorted(q.name for q in db.queues()) == ["events", "sub", "taken"]


def test_a_selector_that_does_not_parse_creates_nothing(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    with pytest.raises(sluice.ExpressionError):
        db.subscribe("events", "s", where="body.total >")
    with pytest.raises(sluice.ExpressionError):
        db.subscribe("events", "s", where="nosuch.path = 1")  # outside the message
    assert [q.name for q in db.queues()] == ["events"]


@pytest.mark.parametrize(
    "options",
    [
        {"max_in_flight": 0},
        {"max_in_flight": "5"},
        {"expire_after": 0},
        {"expire_after": "soon"},
        {"window": 0},
        {"start": -1},
        {"start": "middle"},
        {"durable": "yes"},
        {"retention": "soon"},
        {"durability": "sometimes"},
    ],
)
def test_subscription_settings_out_of_range_are_refused(
    db: sluice.Database, topic: sluice.Queue, options: dict[str, object]
) -> None:
    with pytest.raises(sluice.ConfigurationError):
        db.subscribe("events", "s", **options)  # type: ignore[arg-type]
    assert [q.name for q in db.queues()] == ["events"]


@pytest.mark.parametrize("levels", [0, 11, "3", True])
def test_topic_priority_levels_out_of_range_are_refused(
    db: sluice.Database, levels: object
) -> None:
    with pytest.raises(sluice.ConfigurationError, match="priority_levels"):
        db.create_topic("t", priority_levels=levels)  # type: ignore[arg-type]
    assert db.queues() == []


def test_a_topic_is_not_consumed_and_a_subscription_not_published_to(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "s")
    with pytest.raises(sluice.ConfigurationError, match="is a topic"):
        topic.get()
    with pytest.raises(sluice.ConfigurationError, match="is a subscription"):
        db.queue("s").put("x")
    with pytest.raises(sluice.ConfigurationError, match="error queue"):
        db.create_queue("q", error_queue="events")
    with pytest.raises(sluice.ConfigurationError, match="isolation"):
        db.alter_queue("events", isolation="ordered")
    with pytest.raises(sluice.QueueInUse, match="unsubscribe"):
        db.drop_queue("events")
    with pytest.raises(sluice.ConfigurationError, match="not a subscription"):
        db.unsubscribe("events")
    assert drain(db, "s") == []


def test_consuming_a_dropped_subscription_is_a_clear_error(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    handle = db.subscribe("events", "s")
    db.unsubscribe("s")
    with pytest.raises(sluice.QueueNotFound):
        handle.get()
    with pytest.raises(sluice.QueueNotFound):
        db.unsubscribe("s")


def test_a_stopped_selective_subscription_does_not_pin_what_it_never_receives(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "rare", where="body.kind = 'rare'")
    db.subscribe("events", "all")
    topic.put_many([{"kind": "common", "n": n} for n in range(20)])
    topic.put({"kind": "rare", "n": 20})
    topic.put_many([{"kind": "common", "n": n} for n in range(21, 30)])
    assert len(drain(db, "all")) == 30
    db.recover()  # upkeep: "rare" passes what it will never receive; collection follows
    db.recover()
    assert [m.body["n"] for m in topic.browse(limit=100)] == list(range(20, 30))
    assert drain(db, "rare") == [{"kind": "rare", "n": 20}]
    db.recover()
    assert topic.browse() == []


def test_a_non_durable_subscription_ends_with_its_connection(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    with sluice.connect(url) as first:
        first.create_topic("events")
        first.subscribe("events", "durable")
        first.subscribe("events", "for-now", durable=False)
        first.queue("events").put("x")
        with sluice.connect(url) as second:
            assert {s.name for s in second.subscriptions()} == {"durable", "for-now"}
    with sluice.connect(url) as later:
        assert [s.name for s in later.subscriptions()] == ["durable"]
        assert [m.body for m in later.queue("durable").browse()] == ["x"]


def test_an_ordering_dequeue_returns_its_batch_in_its_order(db: sluice.Database) -> None:
    q = db.create_queue("q")
    q.put_many([{"n": n} for n in range(10)])
    with db.transaction() as tx:
        taken = tx.dequeue("q", order_by=["body.n DESC"], limit=3)
        assert [m.body["n"] for m in taken] == [9, 8, 7]


def test_messages_published_after_a_collection_are_delivered(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    # SQLite numbers a new row after the highest id left: a collection that deleted
    # the topic's newest message would let the next one reuse an id already passed.
    db.subscribe("events", "s")
    for n in range(4):
        topic.put(n)
        assert drain(db, "s") == [n]
        db.recover()
    assert topic.stats()["ready"] == 0


def test_a_subscription_may_settle_without_waiting_for_the_disk(
    db: sluice.Database, topic: sluice.Queue
) -> None:
    db.subscribe("events", "fast", durability="transient")
    db.subscribe("events", "safe")
    assert db.queue("fast").spec.durability == "transient"
    assert db.queue("safe").spec.durability == "persistent"
    topic.put("x")
    assert drain(db, "fast") == ["x"]
