"""The statements of a Spark stream (sluice.spark), without Spark: every backend the same."""

from __future__ import annotations

import json
from typing import cast

import sluice
from sluice.backends.base import MESSAGE_COLUMNS, SparkBackend


def test_stream_rounds_claim_count_read_and_settle_by_range(db: sluice.Database) -> None:
    q = db.create_queue("orders")
    q.put_many([{"n": n} for n in range(10)])
    q.put({"n": 99}, priority=5)
    backend = cast(SparkBackend, db.backend)
    stream = backend.open_stream("orders", "s")
    select = db.selection("orders", "body.n <> 3")

    # Round 1 takes the first four in delivery order (priority first); round 2 the rest.
    assert backend.stream_claim(stream.session, 1, "orders", 4, select) == 4
    assert backend.stream_claim(stream.session, 2, "orders", 100, select) == 6
    assert backend.stream_claim(stream.session, 3, "orders", 100, select) == 0
    backend.set_stream_round(stream.session, 2)
    assert backend.stream_held_count(stream.session, "orders", 0, 1) == 4
    assert backend.stream_held_count(stream.session, "orders", 0, 2) == 10
    body = MESSAGE_COLUMNS.index("body")
    first = backend.stream_held(stream.session, "orders", 0, 1)
    assert sorted(json.loads(r[body])["n"] for r in first) == [0, 1, 2, 99]
    assert {r[-1] for r in first} == {1}  # each row ends with its round
    assert q.stats()["claimed"] == 10
    assert q.stats()["ready"] == 1  # n = 3: not selected

    backend.stream_settle(stream.session, "orders", 0, 1)
    assert q.stats()["claimed"] == 6
    assert backend.open_stream("orders", "s").acked == 1
    backend.stream_settle(stream.session, "orders", 1, 2)
    assert q.stats()["claimed"] == 0
    assert [m.body for m in q.browse()] == [{"n": 3}]
