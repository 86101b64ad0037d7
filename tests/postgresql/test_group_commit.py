"""Group commit on PostgreSQL: acknowledgements that threads of one Database make at once
share a transaction, and each still succeeds or fails on its own."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Literal

import psycopg
import pytest

import sluice
from sluice.backends.group_commit import GroupCommitter
from sluice.backends.postgres import PostgresBackend
from sluice.message import Message
from tests.conftest import schema_of

from .grouping import Queued


def _group(db: sluice.Database) -> GroupCommitter[Any]:
    backend = db.backend
    assert isinstance(backend, PostgresBackend)
    assert backend._group is not None
    return backend._group


def _commit_grouped(db: sluice.Database, txs: list[sluice.Transaction]) -> dict[int, BaseException]:
    """Commit ``txs`` from a thread each: the first alone, held inside its commit until the
    others wait behind it, who then go as one group. What each commit raised, by index."""
    backend = db.backend
    assert isinstance(backend, PostgresBackend)
    queued = threading.Event()
    _group(db)._queue = Queued(len(txs) - 1, queued.set)
    alone = backend._commit_one
    inside, go = threading.Event(), threading.Event()

    def held(plan: Any) -> None:
        if not inside.is_set():
            inside.set()
            assert go.wait(30)
        alone(plan)

    backend._commit_one = held  # type: ignore[method-assign]
    errors: dict[int, BaseException] = {}

    def commit(i: int) -> None:
        try:
            txs[i].commit()
        except BaseException as exc:  # recorded, for the test to judge
            errors[i] = exc

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(len(txs))]
    threads[0].start()
    assert inside.wait(30)  # the first leads, alone, and is held in its commit
    for t in threads[1:]:
        t.start()
    assert queued.wait(30)  # the others wait for it
    go.set()
    for t in threads:
        t.join(30)
    return errors


def _taken(db: sluice.Database, count: int) -> tuple[list[sluice.Transaction], list[Message]]:
    txs, messages = [], []
    for _ in range(count):
        tx = db.transaction()
        (m,) = tx.dequeue("q")
        txs.append(tx)
        messages.append(m)
    return txs, messages


@pytest.mark.parametrize("durability", ["persistent", "transient"])
def test_acknowledgements_made_while_one_commits_go_together(
    url: str, durability: Literal["persistent", "transient"]
) -> None:
    with sluice.connect(url) as db:
        db.create_queue("q", durability=durability).put_many(list(range(4)))
        txs, _ = _taken(db, 4)
        assert _commit_grouped(db, txs) == {}
        group = _group(db)
        assert (group.commits, group.groups) == (4, 2)  # the first alone, then three at once
        assert {k: v for k, v in db.queue("q").stats().items() if v} == {}


def test_a_lost_lease_in_a_group_fails_only_its_own_acknowledgement(url: str) -> None:
    with sluice.connect(url) as db:
        db.create_queue("q").put_many(list(range(4)))
        txs, messages = _taken(db, 4)
        # Recovery gave the third message back behind its holder's back (its session
        # stalled, say): the group's one statement finds a row short.
        with psycopg.connect(url.partition("?")[0], autocommit=True) as admin:
            admin.execute(
                f'UPDATE "{schema_of(url)}".messages SET state = 1, c_session = NULL,'
                " c_tx = NULL WHERE id = %s",
                (messages[2].ref,),
            )
        errors = _commit_grouped(db, txs)
        assert list(errors) == [2]
        assert isinstance(errors[2], sluice.LeaseLost)
        assert [m.body for m in db.queue("q").browse()] == [messages[2].body]


def test_many_threads_acknowledge_each_message_once(url: str) -> None:
    threads, total = 8, 400
    with sluice.connect(url) as db:
        q = db.create_queue("q")
        q.put_many(list(range(total)))
        group = _group(db)
        got: list[int] = []
        lock = threading.Lock()

        def consume() -> None:
            while (m := q.get()) is not None:
                with lock:
                    got.append(m.body)
                m.ack()

        workers = [threading.Thread(target=consume) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        assert Counter(got) == Counter(range(total))
        assert {k: v for k, v in q.stats().items() if v} == {}
        assert group.commits == total
        assert 1 <= group.groups <= total


@pytest.mark.parametrize("value", ["false", "0"])
def test_group_commit_can_be_turned_off(url: str, value: str) -> None:
    with sluice.connect(f"{url}&group_commit={value}") as db:
        backend = db.backend
        assert isinstance(backend, PostgresBackend)
        assert backend._group is None
        q = db.create_queue("q")
        q.put("m")
        m = q.get()
        assert m is not None
        m.ack()
        assert q.stats()["ready"] == 0


def test_enqueues_are_not_grouped(url: str) -> None:
    with sluice.connect(url) as db:
        q = db.create_queue("q")
        q.put("m")
        assert _group(db).commits == 0
        m = q.get()
        assert m is not None
        m.ack()
        assert _group(db).commits == 1
