"""The statements of a Spark stream (sluice.spark), without Spark: every backend the same."""

from __future__ import annotations

import json

import pytest

import sluice
from sluice.backends.base import MESSAGE_COLUMNS


def test_stream_rounds_claim_count_read_and_settle_by_range(db: sluice.Database) -> None:
    q = db.create_queue("orders")
    q.put_many([{"n": n} for n in range(10)])
    q.put({"n": 99}, priority=5)
    backend = db.backend
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
    assert sorted(json.loads(str(r[body]))["n"] for r in first) == [0, 1, 2, 99]
    assert {r[-1] for r in first} == {1}  # each row ends with its round
    assert q.stats()["claimed"] == 10
    assert q.stats()["ready"] == 1  # n = 3: not selected

    backend.stream_settle(stream.session, "orders", 0, 1)
    assert q.stats()["claimed"] == 6
    assert backend.open_stream("orders", "s").acked == 1
    backend.stream_settle(stream.session, "orders", 1, 2)
    assert q.stats()["claimed"] == 0
    assert [m.body for m in q.browse()] == [{"n": 3}]


def test_dropping_a_stream_gives_back_what_it_held_as_it_was(db: sluice.Database) -> None:
    """Messages a stream took and Spark never committed return as they were, every field."""
    q = db.create_queue("orders")
    q.put({"text": 'a "quoted", comma\nand a newline', "empty": ""}, priority=3)
    q.put(b"\x00\x01binary,\n\xff", content_type="application/octet-stream")
    q.put("", content_type="text/plain")  # the empty string, not NULL
    q.put("plain, text", content_type="text/plain", properties={"k": 'v, "w"'})
    q.put({"n": 5}, correlation_id="c-1", reply_to="replies", type=None)
    before = {m.id: m for m in q.browse()}
    backend = db.backend
    stream = backend.open_stream("orders", "s")
    assert backend.stream_claim(stream.session, 1, "orders", 100, None) == 5
    backend.set_stream_round(stream.session, 1)
    assert q.stats()["claimed"] == 5
    assert q.stats()["ready"] == 0
    held = backend.stream_held(stream.session, "orders", 0, 1)
    body = MESSAGE_COLUMNS.index("body")
    assert {r[body] for r in held} >= {b"\x00\x01binary,\n\xff", "", "plain, text"}

    assert backend.drop_stream("orders", "s") is True
    assert q.stats()["claimed"] == 0
    after = {m.id: m for m in q.browse()}
    assert after.keys() == before.keys()
    for key, message in before.items():
        again = after[key]
        assert again.body == message.body
        assert again.priority == message.priority
        assert again.properties == message.properties
        assert again.content_type == message.content_type
        assert again.correlation_id == message.correlation_id
        assert again.reply_to == message.reply_to
        assert again.enqueued_at == message.enqueued_at
        assert again.attempts == message.attempts + 1  # given back, as by any release
    # And they can be consumed as ever.
    with db.transaction() as tx:
        assert len(tx.dequeue("orders", limit=10)) == 5


def test_a_queue_whose_messages_a_stream_holds_is_not_dropped(db: sluice.Database) -> None:
    q = db.create_queue("orders")
    q.put_many([{"n": n} for n in range(3)])
    backend = db.backend
    stream = backend.open_stream("orders", "s")
    assert backend.stream_claim(stream.session, 1, "orders", 10, None) == 3
    backend.set_stream_round(stream.session, 1)
    with pytest.raises(sluice.QueueInUse, match="3 message"):
        db.drop_queue("orders")
    backend.stream_settle(stream.session, "orders", 0, 1)
    db.drop_queue("orders")
