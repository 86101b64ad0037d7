"""Isolation levels and ordered groups on every shared backend: two writers, two readers.

A writer is a producer session (one ``sluice.connect``), a block one of its
transactions. Each scenario says exactly which messages each reader may take,
in which order, and which commits are refused.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice

from .aio_facade import both_apis  # noqa: F401 (the fixture: every test over both APIs)


@pytest.fixture
def dbs(shared_url: str) -> Iterator[tuple[sluice.Database, sluice.Database, sluice.Database]]:
    """Writer 1, writer 2 and the readers' connection, on one database."""
    w1, w2, readers = (sluice.connect(shared_url) for _ in range(3))
    try:
        yield w1, w2, readers
    finally:
        for db in (w1, w2, readers):
            db.close()


def write(db: sluice.Database, queue: str, *bodies: str, group: str | None = None) -> None:
    with db.transaction() as tx:
        for body in bodies:
            tx.enqueue(queue, body, group=group)


def take(tx: sluice.Transaction, queue: str, limit: int = 1) -> list[str]:
    return [m.body for m in tx.dequeue(queue, limit=limit)]


def load(dbs: tuple[sluice.Database, ...], isolation: str) -> sluice.Database:
    """Writer 1 commits blocks [a1 a2] and [a3], writer 2 the block [c1 c2], interleaved."""
    w1, w2, readers = dbs
    readers.create_queue("q", isolation=isolation)  # type: ignore[arg-type]
    write(w1, "q", "a1", "a2")
    write(w2, "q", "c1", "c2")
    write(w1, "q", "a3")
    return readers


# --- none ----------------------------------------------------------------------------
def test_none_lets_readers_interleave_a_writers_messages(dbs: tuple[sluice.Database, ...]) -> None:
    db = load(dbs, "none")
    r1, r2 = db.begin(), db.begin()
    assert take(r1, "q") == ["a1"]
    assert take(r2, "q") == ["a2"]  # the same writer's next message, to another reader
    r1.abort()
    # The protocol hazard the other levels prevent: a1 comes back after a2 was taken.
    assert take(r2, "q") == ["a1"]
    r2.commit()


# --- ordered -------------------------------------------------------------------------
def test_ordered_gives_a_writer_to_one_reader_oldest_first(
    dbs: tuple[sluice.Database, ...],
) -> None:
    w1 = dbs[0]
    db = load(dbs, "ordered")
    r1, r2 = db.begin(), db.begin()
    assert take(r1, "q") == ["a1"]
    # Writer 1 belongs to r1 now: r2 gets writer 2's oldest, then writer 2's next.
    assert take(r2, "q") == ["c1"]
    assert take(r2, "q", limit=5) == ["c2"]
    # Writer 1's messages, even one it commits later, are r1's alone, in order.
    write(w1, "q", "a4")
    assert take(r2, "q", limit=5) == []
    assert take(r1, "q", limit=5) == ["a2", "a3", "a4"]
    assert db.queue("q").browse() == []  # all taken, by one reader or the other
    r2.commit()
    r1.commit()
    assert db.queue("q").stats()["ready"] == 0


def test_ordered_keeps_fifo_per_writer_across_an_abort(dbs: tuple[sluice.Database, ...]) -> None:
    db = load(dbs, "ordered")
    r1, r2 = db.begin(), db.begin()
    assert take(r1, "q", limit=2) == ["a1", "a2"]  # its writer's next, ahead of the older c1
    assert take(r2, "q") == ["c1"]
    r1.abort()  # a1 and a2 go back to the head of writer 1
    r3 = db.begin()
    assert take(r3, "q") == ["a1"]
    assert take(r3, "q", limit=5) == ["a2", "a3"]
    r3.commit()
    assert take(r2, "q") == ["c2"]
    r2.commit()


def test_ordered_release_gives_back_the_last_taken_first(
    dbs: tuple[sluice.Database, ...],
) -> None:
    db = load(dbs, "ordered")
    tx = db.begin()
    (a1,) = tx.dequeue("q")
    (a2,) = tx.dequeue("q")
    with pytest.raises(sluice.MessageStateError, match="later messages of its writer"):
        tx.release(a1)
    tx.release(a2)
    tx.release(a1)
    assert take(tx, "q") == ["a1"]  # the writer's head again
    tx.commit()


# --- blockwise -----------------------------------------------------------------------
def test_blockwise_gives_a_block_to_one_reader_and_refuses_part_of_it(
    dbs: tuple[sluice.Database, ...],
) -> None:
    db = load(dbs, "blockwise")
    r1, r2 = db.begin(), db.begin()
    assert take(r1, "q") == ["a1"]
    # Blocks, not writers, are the unit: r2 may take writer 1's second block.
    assert take(r2, "q") == ["c1"]
    assert take(r2, "q", limit=5) == ["c2"]  # it finishes its block before another
    assert take(r2, "q", limit=5) == ["a3"]
    with pytest.raises(sluice.IncompleteBlock, match="holds part of block"):
        r1.commit()
    assert not r1.closed  # still open: carry on
    assert take(r1, "q") == ["a2"]
    r1.commit()
    r2.commit()
    assert db.queue("q").stats()["ready"] == 0


def test_blockwise_abort_after_a_refused_commit_restores_the_block(
    dbs: tuple[sluice.Database, ...],
) -> None:
    db = load(dbs, "blockwise")
    r1 = db.begin()
    assert take(r1, "q") == ["a1"]
    with pytest.raises(sluice.IncompleteBlock):
        r1.commit()
    r1.abort()
    r2 = db.begin()
    assert take(r2, "q", limit=2) == ["a1", "a2"]
    r2.commit()


# --- ordered_blockwise ---------------------------------------------------------------
def test_ordered_blockwise_owns_the_writer_and_commits_at_block_boundaries(
    dbs: tuple[sluice.Database, ...],
) -> None:
    db = load(dbs, "ordered_blockwise")
    r1, r2 = db.begin(), db.begin()
    assert take(r1, "q") == ["a1"]
    assert take(r2, "q") == ["c1"]  # not a3: writer 1 is r1's
    with pytest.raises(sluice.IncompleteBlock):
        r1.commit()
    assert take(r1, "q") == ["a2"]
    assert take(r1, "q") == ["a3"]
    with pytest.raises(sluice.IncompleteBlock):
        r2.commit()
    assert take(r2, "q") == ["c2"]
    r2.commit()
    r1.commit()


def test_ordered_blockwise_commit_at_the_first_boundary(dbs: tuple[sluice.Database, ...]) -> None:
    db = load(dbs, "ordered_blockwise")
    r1 = db.begin()
    assert take(r1, "q") == ["a1"]
    assert take(r1, "q") == ["a2"]
    r1.commit()  # block [a1 a2] is whole; [a3] stays for the next reader
    r2 = db.begin()
    # Writer 2's oldest, then the rest of its block: a dequeue stops at a boundary.
    assert take(r2, "q", limit=5) == ["c1", "c2"]
    assert take(r2, "q", limit=5) == ["a3"]
    r2.commit()


# --- a killed reader -----------------------------------------------------------------
CHILD = Path(__file__).with_name("reader_child.py")


@pytest.mark.parametrize("isolation", ["ordered", "blockwise", "ordered_blockwise"])
def test_a_killed_readers_writer_comes_back_in_order(
    dbs: tuple[sluice.Database, ...], shared_url: str, isolation: str
) -> None:
    db = load(dbs, isolation)
    with subprocess.Popen(
        [sys.executable, str(CHILD), shared_url, "q", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        assert child.stdout is not None
        report = json.loads(child.stdout.readline())
        assert report["taken"] == ["a1"]
        r2 = db.begin()
        assert take(r2, "q") == ["c1"]  # writer 1 (or its block) is the child's
        if isolation == "blockwise":
            assert take(r2, "q", limit=5) == ["c2"]
            assert take(r2, "q", limit=5) == ["a3"]  # writer 1's other block is free
        r2.abort()
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert db.recover() == [report["session"]]
    r3 = db.begin()
    assert take(r3, "q") == ["a1"]  # back at the head, attempt counted
    assert [m.attempts for m in db.queue("q").browse(state="claimed")] == [1]
    assert take(r3, "q") == ["a2"]
    r3.commit()


@pytest.mark.parametrize("isolation", ["ordered", "ordered_blockwise"])
def test_a_reader_taken_for_dead_takes_no_more_of_the_writer_it_lost(
    dbs: tuple[sluice.Database, ...], isolation: str
) -> None:
    """A reader that stalled past its lease lost what it held to recovery, and its writer
    to the next reader: going on, it took the writer's next messages behind the new
    holder's back, who then skipped them (the fault campaign's movers)."""
    db = load(dbs, isolation)
    stalled = dbs[1].begin()  # a reader on the second writer's connection
    assert take(stalled, "q") == ["a1"]
    db.backend.close_session(stalled.session)  # as recovery does to a stalled session
    r2 = db.begin()
    assert take(r2, "q") == ["a1"]  # writer 1 is r2's now
    assert "a2" not in take(stalled, "q", limit=5)
    assert take(r2, "q", limit=5) == ["a2", "a3"]  # all of them, in order
    r2.commit()
    with pytest.raises(sluice.LeaseLost):
        stalled.commit()


# --- groups --------------------------------------------------------------------------
def test_a_group_goes_to_one_reader_in_order_and_others_carry_on(
    dbs: tuple[sluice.Database, ...],
) -> None:
    w1, w2, db = dbs
    db.create_queue("jobs")  # groups work on any queue, isolation none included
    w1.queue("jobs").put_many(["x1", "x2", "x3"], group="X")
    w2.queue("jobs").put("y1", group="Y")
    w2.queue("jobs").put("free")
    assert [(m.body, m.group) for m in db.queue("jobs").browse()] == [
        ("x1", "X"), ("x2", "X"), ("x3", "X"), ("y1", "Y"), ("free", None)
    ]  # fmt: skip
    r1, r2 = db.begin(), db.begin()
    assert take(r1, "jobs") == ["x1"]
    assert take(r2, "jobs", limit=5) == ["y1", "free"]  # X is r1's; nothing else waits
    w1.queue("jobs").put("x4", group="X")
    assert take(r2, "jobs", limit=5) == []
    assert take(r1, "jobs", limit=5) == ["x2", "x3", "x4"]
    r1.abort()
    r2.commit()
    r3 = db.begin()
    assert [(m.body, m.attempts) for m in r3.dequeue("jobs", limit=5)] == [
        ("x1", 1), ("x2", 1), ("x3", 1), ("x4", 1)
    ]  # fmt: skip
    r3.commit()
    assert db.queue("jobs").stats()["ready"] == 0


def test_a_poison_head_goes_to_the_error_queue_and_the_group_continues(
    dbs: tuple[sluice.Database, ...],
) -> None:
    _, _, db = dbs
    db.create_queue("jobs", max_attempts=2, error_queue="dead")
    db.queue("jobs").put_many(["poison", "next"], group="G")
    for _ in range(2):
        tx = db.begin()
        assert take(tx, "jobs") == ["poison"]
        tx.abort()
    (dead,) = db.queue("dead").browse()
    assert (dead.body, dead.group, dead.origin_queue) == ("poison", "G", "jobs")
    with db.transaction() as tx:
        assert take(tx, "jobs", limit=5) == ["next"]


def test_grouped_work_does_not_block_ungrouped_work_behind_it(
    dbs: tuple[sluice.Database, ...],
) -> None:
    w1, _, db = dbs
    db.create_queue("jobs")
    with w1.transaction() as tx:
        tx.enqueue_many("jobs", [f"g{n}" for n in range(2000)], group="big")
    w1.queue("jobs").put("ungrouped")
    r1, r2 = db.begin(), db.begin()
    assert take(r1, "jobs") == ["g0"]
    # The 1,999 waiting behind g0 are not even candidates: r2 goes straight on.
    assert take(r2, "jobs") == ["ungrouped"]
    assert db.queue("jobs").stats()["ready"] == 1999
    r1.abort()
    r2.commit()


def test_an_expired_head_hands_the_group_to_the_next(dbs: tuple[sluice.Database, ...]) -> None:
    _, _, db = dbs
    db.create_queue("jobs")
    db.queue("jobs").put("short-lived", group="G", ttl=0.05)
    db.queue("jobs").put("lasting", group="G")
    deadline = time.monotonic() + 10
    while db.queue("jobs").stats()["expired"] == 0:  # expiry runs with stats
        assert time.monotonic() < deadline
        time.sleep(0.01)  # the time to live has to pass
    with db.transaction() as tx:
        assert take(tx, "jobs") == ["lasting"]


def test_group_release_order_and_own_enqueues(dbs: tuple[sluice.Database, ...]) -> None:
    _, _, db = dbs
    db.create_queue("jobs")
    db.queue("jobs").put_many(["a", "b"], group="G")
    tx = db.begin()
    a, b = tx.dequeue("jobs", limit=2)
    with pytest.raises(sluice.MessageStateError, match="later messages of its group"):
        tx.release(a)
    tx.release(b)
    # A transaction's own uncommitted enqueue to a group holds no lane: after commit
    # it queues behind the group's older messages.
    tx.enqueue("jobs", "c", group="G")
    assert take(tx, "jobs", limit=5) == ["b", "c"]
    tx.abort()
    with db.transaction() as again:
        assert take(again, "jobs", limit=5) == ["a", "b"]


def test_bad_groups_and_isolation_changes_are_refused(dbs: tuple[sluice.Database, ...]) -> None:
    _, _, db = dbs
    q = db.create_queue("jobs")
    for bad in ("", 7, "x" * 1001):
        with pytest.raises(sluice.MessageError, match="group must be"):
            q.put("m", group=bad)  # type: ignore[arg-type]
    with pytest.raises(sluice.ConfigurationError, match="isolation must be one of"):
        db.create_queue("other", isolation="serializable")  # type: ignore[arg-type]
    q.put("m")
    with pytest.raises(sluice.QueueInUse, match="only while it is empty"):
        db.alter_queue("jobs", isolation="ordered")
    taken = q.get()
    assert taken is not None
    taken.ack()
    assert db.alter_queue("jobs", isolation="ordered").isolation == "ordered"
    assert db.queue("jobs").stats()["ready"] == 0
