"""Consumers waiting on an empty queue: each batch costs its taker one claim.

A consumer that comes back for more to a queue it found empty, when every message since
went to a waiter that took it, waits with the others instead of claiming: before, each
dequeue(wait=...) of a consumer keeping up with its producer made an empty claim first,
more than one claim for each batch it took.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import sluice

BATCHES = 10


def _count_claims(db: sluice.Database) -> list[int]:
    """Counts the backend's claims (the real backend, its calls counted)."""
    backend = db.context.backend
    claim = backend.claim
    calls = [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return claim(*args, **kwargs)

    backend.claim = counted  # type: ignore[method-assign]
    return calls


def _waiting_on(db: sluice.Database, queue: str) -> None:
    deadline = time.monotonic() + 30
    while not db.context.wakeups.waiting().get(queue):  # registered: blocked, or about to be
        assert time.monotonic() < deadline, f"nobody came to wait on {queue!r}"


def test_a_consumer_that_keeps_up_claims_once_per_batch(db: sluice.Database) -> None:
    db.create_queue("jobs")
    calls = _count_claims(db)
    taken: list[int] = []

    def consume() -> None:
        for _ in range(BATCHES):
            with db.transaction() as tx:
                taken.append(len(tx.dequeue("jobs", limit=10, wait=30.0)))

    consumer = threading.Thread(target=consume)
    consumer.start()
    for n in range(BATCHES):
        _waiting_on(db, "jobs")
        with db.transaction() as tx:
            tx.enqueue_many("jobs", [{"batch": n, "i": i} for i in range(10)])
    consumer.join()

    assert taken == [10] * BATCHES
    # The first dequeue finds the queue empty and waits; every later one waits without
    # claiming. (PostgreSQL's fallback tick, once a second, may add one.) Before: 2 a batch.
    assert calls[0] <= BATCHES + 2, calls[0]


def test_a_newcomer_finds_what_no_waiter_took(db: sluice.Database) -> None:
    """Quiet is a hint for waiting consumers only: what nobody waited for is found at once,
    by a get() that does not wait and by one that does."""
    q = db.create_queue("jobs")
    assert q.get() is None
    assert db.queue("jobs").get(wait=0.01) is None  # empty, and waited: quiet now
    q.put({"n": 1})  # no waiter: nobody was given it
    m = q.get(wait=30.0)
    assert m is not None
    m.ack()
    q.put({"n": 2})
    m = q.get()
    assert m is not None
    m.ack()
