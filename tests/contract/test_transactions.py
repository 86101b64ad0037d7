"""Queue transactions: grouping, isolation from others, commit and abort."""

from __future__ import annotations

import pytest

import sluice

from .aio_facade import both_apis  # noqa: F401 (the fixture: every test over both APIs)


def bodies(messages: list[sluice.Message]) -> list[object]:
    return [m.body for m in messages]


def test_enqueues_invisible_to_others_until_commit(db: sluice.Database, q: sluice.Queue) -> None:
    with db.transaction() as tx:
        tx.enqueue("orders", "a")
        tx.enqueue("orders", "b")
        assert q.browse() == []
        assert q.get() is None
        assert bodies(tx.browse("orders")) == ["a", "b"]
    assert bodies(q.browse()) == ["a", "b"]


def test_transaction_can_take_its_own_enqueues(db: sluice.Database, q: sluice.Queue) -> None:
    q.put("committed")
    with db.transaction() as tx:
        tx.enqueue("orders", "mine")
        taken = tx.dequeue("orders", limit=10)
        assert bodies(taken) == ["committed", "mine"]
    assert q.browse() == []
    assert q.stats()["pending"] == 0


def test_abort_undoes_everything(db: sluice.Database) -> None:
    a = db.create_queue("a")
    b = db.create_queue("b")
    for n in range(5):
        a.put(n)
    b.put("kept")
    tx = db.begin()
    taken = tx.dequeue("a", limit=3)
    assert bodies(taken) == [0, 1, 2]
    tx.enqueue("b", "new")
    tx.dequeue("b")
    tx.enqueue("a", "also new")
    tx.browse("a")  # flush the enqueue, so abort must remove a stored row
    tx.abort()
    after = a.browse()
    assert bodies(after) == [0, 1, 2, 3, 4]
    assert [m.attempts for m in after] == [1, 1, 1, 0, 0]
    assert bodies(b.browse()) == ["kept"]
    assert b.browse()[0].attempts == 1
    assert a.stats()["pending"] == 0


def test_commit_spans_queues_atomically(db: sluice.Database) -> None:
    inbox = db.create_queue("inbox")
    outbox = db.create_queue("outbox")
    inbox.put({"order": 7})
    with db.transaction() as tx:
        (m,) = tx.dequeue("inbox")
        tx.enqueue("outbox", {"invoice": m.body["order"]})
    assert inbox.browse() == []
    assert bodies(outbox.browse()) == [{"invoice": 7}]


def test_exception_in_with_block_aborts(db: sluice.Database, q: sluice.Queue) -> None:
    q.put("a")
    with pytest.raises(RuntimeError), db.transaction() as tx:
        tx.dequeue("orders")
        tx.enqueue("orders", "b")
        raise RuntimeError("boom")
    assert bodies(q.browse()) == ["a"]


def test_release_in_transaction_gives_back_now(db: sluice.Database, q: sluice.Queue) -> None:
    for body in "abc":
        q.put(body)
    with db.transaction() as tx:
        msgs = tx.dequeue("orders", limit=10)
        tx.release(msgs[0])
        assert bodies(q.browse()) == ["a"]
    assert bodies(q.browse()) == ["a"]
    assert q.browse()[0].attempts == 1


def test_release_of_own_enqueue_keeps_it_uncommitted(db: sluice.Database, q: sluice.Queue) -> None:
    tx = db.begin()
    tx.enqueue("orders", "mine")
    (m,) = tx.dequeue("orders")
    tx.release(m)
    assert q.browse() == []
    assert bodies(tx.browse("orders")) == ["mine"]
    tx.commit()
    (m2,) = q.browse()
    assert (m2.body, m2.attempts) == ("mine", 0)


def test_reject_in_transaction_applies_at_commit_only(db: sluice.Database) -> None:
    q = db.create_queue("jobs", error_queue="jobs.errors")
    errors = db.queue("jobs.errors")
    q.put("x")
    tx = db.begin()
    (m,) = tx.dequeue("jobs")
    tx.reject(m, "nope")
    tx.abort()
    assert bodies(q.browse()) == ["x"]
    assert errors.browse() == []
    with db.transaction() as tx2:
        (m,) = tx2.dequeue("jobs")
        tx2.reject(m, "nope")
    assert q.browse() == []
    assert [(e.body, e.error) for e in errors.browse()] == [("x", "nope")]


def test_abort_returns_messages_in_original_order_among_others(
    db: sluice.Database, q: sluice.Queue
) -> None:
    for n in range(6):
        q.put(n)
    tx = db.begin()
    tx.dequeue("orders", limit=2)  # 0, 1
    other = db.begin()
    assert bodies(other.dequeue("orders", limit=2)) == [2, 3]
    tx.abort()
    other.commit()
    assert bodies(q.browse()) == [0, 1, 4, 5]


def test_messages_taken_in_a_transaction_are_settled_by_it(
    db: sluice.Database, q: sluice.Queue
) -> None:
    q.put("a")
    with db.transaction() as tx:
        (m,) = tx.dequeue("orders")
        with pytest.raises(sluice.MessageStateError, match="belongs to transaction"):
            m.ack()


def test_finished_transaction_refuses_use(db: sluice.Database, q: sluice.Queue) -> None:
    tx = db.begin()
    tx.commit()
    for action in (
        lambda: tx.enqueue("orders", 1),
        lambda: tx.dequeue("orders"),
        tx.commit,
        lambda: tx.browse("orders"),
    ):
        with pytest.raises(sluice.TransactionClosed, match="committed"):
            action()
    aborted = db.begin()
    aborted.abort()
    aborted.abort()  # idempotent
    with pytest.raises(sluice.TransactionClosed, match="aborted"):
        aborted.commit()
    with pytest.raises(sluice.TransactionClosed):
        tx.abort()


def test_settling_a_message_not_held_is_refused(db: sluice.Database, q: sluice.Queue) -> None:
    q.put("a")
    q.put("b")
    tx1 = db.begin()
    tx2 = db.begin()
    (m1,) = tx1.dequeue("orders")
    with pytest.raises(sluice.MessageStateError, match="not held"):
        tx2.release(m1)
    tx1.release(m1)
    with pytest.raises(sluice.MessageStateError, match="not held"):
        tx1.release(m1)
    tx1.abort()
    tx2.abort()


def test_empty_transaction_commits(db: sluice.Database) -> None:
    with db.transaction() as tx:
        pass
    assert tx.closed


def test_transaction_ids_name_session_and_number(db: sluice.Database, q: sluice.Queue) -> None:
    tx = db.begin()
    mid = tx.enqueue("orders", "x")
    assert mid == f"{tx.id}/1"
    assert tx.id.startswith(f"{db.session}/")
    tx.commit()


def test_with_block_leaves_an_explicitly_ended_transaction_alone(
    db: sluice.Database, q: sluice.Queue
) -> None:
    with db.transaction() as tx:
        tx.enqueue("orders", "dropped")
        tx.abort()
    with db.transaction() as tx2:
        tx2.enqueue("orders", "kept")
        tx2.commit()
    assert bodies(q.browse()) == ["kept"]


def test_a_message_lost_to_recovery_is_not_taken_twice(shared_url: str) -> None:
    """A transaction whose session was taken for dead (its process stalled past the
    lease) lost what it held; taking such a message again handed it out twice in one
    transaction, and a mover moved it twice (the fault campaign's finding)."""
    with sluice.connect(shared_url) as stalled, sluice.connect(shared_url) as other:
        other.create_queue("jobs").put("j1")
        tx = stalled.begin()
        assert bodies(tx.dequeue("jobs")) == ["j1"]
        other.backend.close_session(tx.session)  # as recovery does to a stalled session
        with pytest.raises(sluice.LeaseLost):
            tx.dequeue("jobs")
        tx.abort()
        with other.transaction() as again:
            assert bodies(again.dequeue("jobs", limit=5)) == ["j1"]  # back, once
