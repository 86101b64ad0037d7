"""Several connections consuming the same subscriptions while a publisher publishes:
each subscription gets every message exactly once, whoever takes it."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import sluice

pytestmark = pytest.mark.slow

MESSAGES = 300


def test_competing_consumers_of_each_subscription_take_each_message_once(
    shared_url: str,
) -> None:
    url = shared_url
    with sluice.connect(url) as db:
        db.create_topic("events")
        db.subscribe("events", "all", window=7)  # small: many pulls race each other
        db.subscribe("events", "even", where="body.kind = 'even'", window=5)
    seen: dict[str, Counter[int]] = {"all": Counter(), "even": Counter()}
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []

    def consume(name: str) -> None:
        try:
            with sluice.connect(url) as db:
                while True:
                    # Read before the dequeue: an empty dequeue that began after the
                    # last publish means nothing is left. Read after it, an empty dequeue
                    # that ended before the publisher began, its thread then held up (GIL,
                    # loaded cores) until the publish was over, stopped the consumer.
                    published = done.is_set()
                    with db.transaction() as tx:
                        taken = tx.dequeue(name, limit=3, wait=0.2)
                        with lock:
                            seen[name].update(m.body["n"] for m in taken)
                    if not taken and published:
                        return
        except BaseException as exc:
            errors.append(exc)

    consumers = [
        threading.Thread(target=consume, args=(name,)) for name in ("all", "all", "even", "even")
    ]
    for thread in consumers:
        thread.start()
    with sluice.connect(url) as publisher:
        topic = publisher.queue("events")
        for start in range(0, MESSAGES, 10):
            with publisher.transaction() as tx:
                tx.enqueue_many(
                    "events",
                    [
                        {"n": n, "kind": "odd" if n % 2 else "even"}
                        for n in range(start, start + 10)
                    ],
                )
    done.set()
    for thread in consumers:
        thread.join(120)
    assert not [thread for thread in consumers if thread.is_alive()], "a consumer hangs"
    assert not errors
    assert seen["all"] == Counter(range(MESSAGES))
    assert seen["even"] == Counter(range(0, MESSAGES, 2))
    with sluice.connect(url) as db:
        db.recover()
        assert topic.name == "events"
        assert db.queue("events").stats()["ready"] == 0
