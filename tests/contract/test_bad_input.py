"""Bad input gets a specific error, and the database is left as it was."""

from __future__ import annotations

import pytest

import sluice


def test_unknown_queue_everywhere(db: sluice.Database) -> None:
    with pytest.raises(sluice.QueueNotFound, match=r"create it with db.create_queue\('nope'\)"):
        db.queue("nope")
    q = db.create_queue("gone")
    db.drop_queue("gone")
    for action in (lambda: q.put(1), q.get, q.browse, q.stats):
        with pytest.raises(sluice.QueueNotFound):
            action()
    tx = db.begin()
    with pytest.raises(sluice.QueueNotFound):
        tx.enqueue("nope", 1)
    with pytest.raises(sluice.QueueNotFound):
        tx.dequeue("nope")
    tx.commit()


def test_queue_dropped_before_commit_fails_the_commit(db: sluice.Database) -> None:
    keep = db.create_queue("keep")
    db.create_queue("gone")
    tx = db.begin()
    tx.enqueue("keep", "a")
    tx.enqueue("gone", "b")
    db.drop_queue("gone")
    with pytest.raises(sluice.QueueNotFound, match="'gone'"):
        tx.commit()
    assert not tx.closed
    tx.abort()
    assert keep.browse() == []


@pytest.mark.parametrize(
    "body",
    [{1, 2}, object(), float("nan"), {"x": float("inf")}, "\ud800 lone surrogate", {"k": b"x"}],
)
def test_bodies_that_cannot_be_stored(q: sluice.Queue, body: object) -> None:
    with pytest.raises(sluice.InvalidBody):
        q.put(body)
    assert q.stats()["ready"] == 0


def test_payload_over_the_limit(db: sluice.Database, q: sluice.Queue) -> None:
    limit = 1024 * 1024
    q.put("x" * limit)
    with pytest.raises(sluice.PayloadTooLarge, match=f"over this queue's limit of {limit} bytes"):
        q.put("x" * (limit + 1))
    with pytest.raises(sluice.PayloadTooLarge):
        q.put(b"\0" * (limit + 1))
    with pytest.raises(sluice.PayloadTooLarge):
        q.put("é" * (limit // 2 + 1))  # two bytes per character in UTF-8
    with pytest.raises(sluice.PayloadTooLarge):
        q.put({"blob": "x" * limit})
    assert q.stats()["ready"] == 1


def test_configurable_payload_limit(backend_url: str) -> None:
    with sluice.connect(backend_url, max_message_size=100) as small:
        q = small.create_queue("small")
        q.put("x" * 100)
        with pytest.raises(sluice.PayloadTooLarge):
            q.put("x" * 101)
        big = small.create_queue("big", max_size=1000)
        big.put("x" * 1000)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"priority": 1.5}, sluice.MessageError),
        ({"priority": True}, sluice.MessageError),
        ({"priority": 2**70}, sluice.MessageError),
        ({"properties": {"k": {1, 2}}}, sluice.MessageError),
        ({"properties": {1: "x"}}, sluice.MessageError),
        ({"correlation_id": 5}, sluice.MessageError),
        ({"delay": -1}, sluice.ConfigurationError),
        ({"ttl": 0}, sluice.ConfigurationError),
        ({"ttl": float("nan")}, sluice.ConfigurationError),
    ],
)
def test_invalid_message_options(
    q: sluice.Queue, kwargs: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        q.put("x", **kwargs)  # type: ignore[arg-type]
    assert q.stats()["ready"] == 0


def test_invalid_dequeue_options(db: sluice.Database, q: sluice.Queue) -> None:
    with db.transaction() as tx:
        with pytest.raises(sluice.ConfigurationError, match="limit"):
            tx.dequeue("orders", limit=0)
        with pytest.raises(sluice.ConfigurationError, match="wait"):
            tx.dequeue("orders", wait=-1)
    with pytest.raises(sluice.ConfigurationError, match="state"):
        q.browse(state="nonsense")  # type: ignore[arg-type]


def test_reject_needs_a_reason(db: sluice.Database, q: sluice.Queue) -> None:
    q.put("x")
    with db.transaction() as tx:
        (m,) = tx.dequeue("orders")
        with pytest.raises(sluice.MessageError, match="reason"):
            tx.reject(m, "")
        tx.release(m)
    assert len(q) == 1


def test_using_a_closed_database_says_so(backend_url: str) -> None:
    db = sluice.connect(backend_url)
    q = db.create_queue("a")
    db.close()
    db.close()  # idempotent
    with pytest.raises(sluice.SluiceError, match="closed"):
        q.put(1)
    with pytest.raises(sluice.SluiceError, match="closed"):
        q.browse()
    with pytest.raises(sluice.SluiceError, match="closed"):
        db.begin()


def test_a_misspelt_name_gets_did_you_mean(db: sluice.Database) -> None:
    db.create_queue("orders")
    db.create_topic("events")
    with pytest.raises(sluice.QueueNotFound) as missing:
        db.queue("ordrs").put(1)
    assert missing.value.name == "ordrs"
    assert missing.value.suggestions == ("orders",)
    assert str(missing.value) == (
        "queue 'ordrs' does not exist (did you mean 'orders'?); "
        "create it with db.create_queue('ordrs')"
    )
    # Each interface says how to create it in its own words.
    assert missing.value.describe("sluice create ordrs").endswith("?); sluice create ordrs")
    with pytest.raises(sluice.QueueNotFound) as topic:
        db.subscribe("evnts", "audit")
    assert topic.value.kind == "topic"
    assert "did you mean 'events'?" in str(topic.value)
    assert "db.create_topic('evnts')" in str(topic.value)
