"""Failed messages sent back to their source queue (``Queue.retry``) or deleted
(``Queue.discard``), one by its position or all a selector matches, on every backend."""

from __future__ import annotations

import threading

import pytest

import sluice
from sluice.errors import ConfigurationError, ExpressionError, QueueNotFound


@pytest.fixture
def failed(db: sluice.Database) -> sluice.Queue:
    """orders.errors holding five rejected orders, n = 0..4."""
    db.create_queue("orders", error_queue="orders.errors", max_attempts=3)
    orders = db.queue("orders")
    orders.put_many([{"n": n} for n in range(5)])
    for n in range(5):
        m = orders.get()
        assert m is not None
        m.reject(f"bad {n}")
    return db.queue("orders.errors")


def bodies(q: sluice.Queue) -> list[object]:
    return [m.body for m in q.browse()]


def test_retry_moves_what_the_selector_matches_back_as_fresh(
    db: sluice.Database, failed: sluice.Queue
) -> None:
    assert db.queue("orders").get() is None
    done = failed.retry(where="body.n >= 3")
    assert done.moved == {"orders": 2}
    assert done.left == {}
    assert done.total == 2
    assert bodies(failed) == [{"n": 0}, {"n": 1}, {"n": 2}]
    back = db.queue("orders").browse()
    assert [b.body for b in back] == [{"n": 3}, {"n": 4}]
    assert all(b.attempts == 0 and b.error is None and b.origin_queue is None for b in back)


def test_retry_and_discard_one_by_its_position(db: sluice.Database, failed: sluice.Queue) -> None:
    first, second = failed.browse(2)
    assert failed.retry(at=first.position).moved == {"orders": 1}
    assert failed.discard(at=str(second.position)) == 1
    assert bodies(failed) == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert bodies(db.queue("orders")) == [{"n": 0}]
    assert failed.discard(at=second.position) == 0  # gone already


def test_discard_deletes_all_that_match_and_leaves_the_rest(failed: sluice.Queue) -> None:
    assert failed.discard(where="body.n < 2") == 2
    assert bodies(failed) == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert failed.discard() == 3
    assert failed.stats()["ready"] == 0


def test_retry_leaves_sources_not_allowed(db: sluice.Database, failed: sluice.Queue) -> None:
    done = failed.retry(allowed=lambda source: source != "orders")
    assert done.moved == {}
    assert done.left == {"orders": 5}
    assert failed.stats()["ready"] == 5


def test_retry_leaves_messages_of_a_dropped_source(
    db: sluice.Database, failed: sluice.Queue
) -> None:
    db.drop_queue("orders")
    assert failed.retry() == ({}, {"orders": 5})


def test_failed_in_place_without_an_error_queue_go_back_to_ready(db: sluice.Database) -> None:
    plain = db.create_queue("plain")
    plain.put("x")
    m = plain.get()
    assert m is not None
    m.reject("no")
    assert plain.stats()["failed"] == 1
    assert plain.retry().moved == {"plain": 1}
    assert plain.stats()["failed"] == 0
    again = plain.get()
    assert again is not None
    assert again.body == "x"
    assert again.attempts == 0


def test_what_is_held_or_never_failed_is_not_touched(
    db: sluice.Database, failed: sluice.Queue
) -> None:
    failed.put({"n": 99})  # enqueued straight into the error queue: it came from nowhere
    held = failed.get()  # a consumer of the error queue holds n = 0
    assert held is not None
    assert held.body == {"n": 0}
    assert failed.retry().moved == {"orders": 4}
    assert failed.discard() == 0
    assert bodies(failed) == [{"n": 99}]
    held.release()


def test_retry_wakes_a_consumer_waiting_on_the_source(
    db: sluice.Database, failed: sluice.Queue
) -> None:
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(db.queue("orders").get(wait=10)))
    waiter.start()
    failed.retry(where="body.n = 4")
    waiter.join(10)
    (m,) = got
    assert isinstance(m, sluice.Message)
    assert m.body == {"n": 4}
    m.ack()


def test_bad_requests_say_what_was_wrong(db: sluice.Database, failed: sluice.Queue) -> None:
    with pytest.raises(ExpressionError):
        failed.retry(where="body.n >")
    with pytest.raises(ConfigurationError, match="not both"):
        failed.discard(where="body.n = 1", at="0:1")
    with pytest.raises(QueueNotFound):
        db.queue("nowhere").retry()
