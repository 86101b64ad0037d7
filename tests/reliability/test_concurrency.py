"""Several processes and threads drain one queue with random aborts: each message exactly once."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import sluice

WORKER = Path(__file__).with_name("drain_worker.py")
MESSAGES = 20_000

pytestmark = pytest.mark.slow


def test_four_processes_two_threads_each_drain_exactly_once(shared_url: str) -> None:
    url = shared_url + ("?synchronous=NORMAL" if shared_url.startswith("sqlite") else "")
    with sluice.connect(url) as db:
        db.create_queue("in")
        db.create_queue("done")
        for start in range(0, MESSAGES, 1000):
            with db.transaction() as tx:
                for n in range(start, start + 1000):
                    tx.enqueue("in", {"n": n})
    workers = [
        subprocess.Popen([sys.executable, str(WORKER), url, str(seed), "2"]) for seed in range(4)
    ]
    for w in workers:
        assert w.wait(300) == 0
    with sluice.connect(url) as db:
        assert db.queue("in").stats() == dict.fromkeys(
            ("ready", "delayed", "pending", "claimed", "expired", "failed", "done"), 0
        )
        receipts: list[dict[str, int]] = []
        while batch := db.queue("done").browse(limit=5000, state="ready"):
            with db.transaction() as tx:
                taken = tx.dequeue("done", limit=5000)
                receipts.extend(m.body for m in taken)
            assert len(batch) == len(taken)
        counts = Counter(r["n"] for r in receipts)
        assert len(receipts) == MESSAGES
        assert set(counts) == set(range(MESSAGES))
        assert max(counts.values()) == 1
        # The random aborts really happened: some receipts record an earlier failed attempt.
        assert any(r["attempts"] > 0 for r in receipts)
