"""Database.get_many and ack_many: several messages taken at once, each held and settled
on its own; many acknowledgements committed at once, each all or nothing on its own."""

from __future__ import annotations

import pytest

import sluice


def bodies(messages: list[sluice.Message]) -> list[object]:
    return [m.body for m in messages]


def test_takes_up_to_the_limit_in_the_order_of_the_queues(db: sluice.Database) -> None:
    a, b = db.create_queue("a"), db.create_queue("b")
    assert db.get_many(["a", "b"], limit=5) == []
    a.put_many(["a1", "a2"])
    b.put_many(["b1", "b2", "b3"])
    taken = db.get_many(["a", "b"], limit=4)
    assert bodies(taken) == ["a1", "a2", "b1", "b2"]
    assert [m.queue for m in taken] == ["a", "a", "b", "b"]
    assert a.stats()["claimed"] == 2
    assert b.stats()["claimed"] == 2
    assert b.stats()["ready"] == 1
    for m in taken:
        m.ack()
    assert a.stats()["claimed"] == b.stats()["claimed"] == 0
    assert bodies(db.get_many(["b"], limit=10)) == ["b3"]


def test_each_is_settled_alone(db: sluice.Database) -> None:
    q = db.create_queue("q", max_attempts=2, error_queue="q.errors")
    q.put_many(["one", "two", "three", "four"])
    one, two, three, four = db.get_many(["q"], limit=4)
    two.release()  # back to its place, the others still held
    assert q.stats() == {**q.stats(), "claimed": 3, "ready": 1}
    three.reject("bad")
    one.ack()
    assert q.stats()["claimed"] == 1
    with pytest.raises(sluice.MessageStateError):
        one.ack()  # settled already
    # An abort of one part gives back its own message only.
    four.holder.abort()  # type: ignore[union-attr]
    assert q.stats() == {**q.stats(), "claimed": 0, "ready": 2}
    assert bodies(db.queue("q.errors").browse(limit=10)) == ["three"]
    again = db.get_many(["q"], limit=4)
    assert bodies(again) == ["two", "four"]
    assert [m.attempts for m in again] == [1, 1]
    assert db.ack_many(again) == [None, None]


def test_a_group_gives_one_message_at_a_time(db: sluice.Database) -> None:
    q = db.create_queue("q")
    q.put_many(["g1", "g2", "g3"], group="G")
    q.put("free")
    first = db.get_many(["q"], limit=10)
    assert bodies(first) == ["g1", "free"]  # the group's next waits for its head's settle
    assert db.get_many(["q"], limit=10) == []
    first[0].ack()
    second = db.get_many(["q"], limit=10)
    assert bodies(second) == ["g2"]
    second[0].release()  # back to the head of its group
    third = db.get_many(["q"], limit=10)
    assert bodies(third) == ["g2"]
    assert db.ack_many([*third, first[1]]) == [None, None]
    assert bodies(db.get_many(["q"], limit=10)) == ["g3"]


def test_a_capped_queue_gives_no_more_than_its_credit(db: sluice.Database) -> None:
    q = db.create_queue("q", max_in_flight=2)
    q.put_many(["m1", "m2", "m3"])
    taken = db.get_many(["q"], limit=10)
    assert bodies(taken) == ["m1", "m2"]
    assert db.get_many(["q"], limit=10) == []
    taken[0].ack()
    assert bodies(db.get_many(["q"], limit=10)) == ["m3"]


def test_isolated_queues_and_subscriptions_keep_their_order(db: sluice.Database) -> None:
    q = db.create_queue("q", isolation="ordered")
    q.put_many(["i1", "i2", "i3"])
    db.subscribe(db.create_topic("t").name, "s")
    with db.transaction() as tx:
        tx.enqueue("t", "t1")
        tx.enqueue("t", "t2")
    taken = db.get_many(["q", "s"], limit=5)
    # One writer's messages go to one taker at a time, in order: the rest wait.
    assert bodies(taken) == ["i1", "t1", "t2"]
    assert db.ack_many(taken) == [None] * 3
    for expected in ("i2", "i3"):
        (next_one,) = db.get_many(["q", "s"], limit=5)
        assert next_one.body == expected
        next_one.ack()
    assert q.stats()["ready"] == q.stats()["claimed"] == 0


def test_ack_many_commits_each_and_refuses_what_it_cannot_ack(db: sluice.Database) -> None:
    q = db.create_queue("q")
    q.put_many([f"m{i}" for i in range(7)])
    taken = db.get_many(["q"], limit=3)
    single = q.get()
    assert single is not None
    assert db.ack_many([]) == []
    assert db.ack_many([*taken, single]) == [None] * 4
    assert q.stats()["claimed"] == 0
    with pytest.raises(sluice.MessageStateError, match="already been settled"):
        db.ack_many(taken)
    browsed = q.browse(limit=1)[0]
    more = db.get_many(["q"], limit=2)
    with pytest.raises(sluice.MessageStateError, match="browsed"):
        db.ack_many([more[0], browsed])
    with pytest.raises(sluice.MessageStateError, match="twice"):
        db.ack_many([more[0], more[0]])
    assert q.stats()["claimed"] == 2  # nothing of a refused call was acknowledged
    with db.transaction() as tx:
        mine = tx.dequeue("q")
        assert len(mine) == 1
        with pytest.raises(sluice.MessageStateError, match="belongs to transaction"):
            db.ack_many(mine)
    assert db.ack_many(more) == [None, None]
    assert q.stats() == {**q.stats(), "ready": 0, "claimed": 0}


def test_ack_many_of_a_lost_message_fails_that_one_alone(db: sluice.Database) -> None:
    q = db.create_queue("q")
    q.put_many(["kept", "lost"])
    kept, lost = db.get_many(["q"], limit=2)
    # Recovery gives back what the (stalled) session held; another taker has it now.
    db.backend.close_session(db.session)
    taker = db.get_many(["q"], limit=2)
    assert sorted(map(str, bodies(taker))) == ["kept", "lost"]
    results = db.ack_many([kept, lost])
    assert all(isinstance(r, sluice.LeaseLost) for r in results)
    assert db.ack_many(taker) == [None, None]
    assert q.stats()["claimed"] == 0


def test_retention_keeps_what_ack_many_settles(db: sluice.Database) -> None:
    q = db.create_queue("audit", retention=3600)
    q.put_many(["r1", "r2"])
    assert db.ack_many(db.get_many(["audit"], limit=2)) == [None, None]
    assert q.stats()["done"] == 2


def test_refusals(db: sluice.Database) -> None:
    db.create_queue("q")
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(sluice.ConfigurationError, match="limit"):
            db.get_many(["q"], limit=bad)  # type: ignore[arg-type]
    with pytest.raises(sluice.ConfigurationError, match="list of queue names"):
        db.get_many("q", limit=2)
    with pytest.raises(sluice.QueueNotFound):
        db.get_many(["q", "nope"], limit=2)
