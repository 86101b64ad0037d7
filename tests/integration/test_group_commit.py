"""Group commit: concurrent commits share an fsync, and each stays all-or-nothing."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

import sluice
from sluice.backends.base import CommitPlan, Envelope
from sluice.backends.sqlite import SQLiteBackend


def _envelope(queue: str, num: int, body: str) -> Envelope:
    return Envelope(queue, num, 0, body, "text/plain", None, None, None, 1.0, 1.0, None)


def test_one_failing_plan_in_a_group_leaves_the_others_committed(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        db.create_queue("a")
        backend = db.backend
        assert isinstance(backend, SQLiteBackend)
        plans = [
            CommitPlan(session=db.session, tx=9001, enqueues=[_envelope("a", 1, "first")]),
            CommitPlan(
                session=db.session,
                tx=9002,
                enqueues=[_envelope("a", 1, "lost"), _envelope("nope", 2, "x")],
            ),
            CommitPlan(session=db.session, tx=9003, enqueues=[_envelope("a", 1, "third")]),
        ]
        results = backend.commit_many(plans)
        assert results[0] is None
        assert isinstance(results[1], sluice.QueueNotFound)
        assert results[2] is None
        assert [m.body for m in db.queue("a").browse()] == ["first", "third"]


def test_concurrent_producers_and_consumers_at_full_durability(tmp_path: Path) -> None:
    threads, per_thread = 6, 150
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        q = db.create_queue("a")
        backend = db.backend
        assert isinstance(backend, SQLiteBackend)
        group = backend._group
        assert group is not None
        got: list[int] = []
        lock = threading.Lock()

        def produce(t: int) -> None:
            for i in range(per_thread):
                q.put(t * per_thread + i)

        def consume() -> None:
            while True:
                m = q.get(wait=0.5)
                if m is None:
                    return
                with lock:
                    got.append(m.body)
                m.ack()

        workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
        workers += [threading.Thread(target=consume) for _ in range(3)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        total = threads * per_thread
        assert Counter(got) == Counter(range(total))
        assert q.stats()["ready"] == 0
        # Every put went through the group path; every ack, a plain acknowledgement,
        # synced outside the connection (sqlite_sync), the acks written meanwhile sharing.
        assert group.commits == total
        assert 1 <= group.groups <= group.commits
        assert backend._wal is not None
        assert 1 <= backend._wal.syncs <= total


@pytest.mark.parametrize("group_commit", [True, False])
def test_group_commit_can_be_switched_off(tmp_path: Path, group_commit: bool) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}?group_commit={int(group_commit)}"
    with sluice.connect(url) as db:
        backend = db.backend
        assert isinstance(backend, SQLiteBackend)
        assert (backend._group is not None) is group_commit
        db.create_queue("a").put(1)
