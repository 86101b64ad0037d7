"""A mover process is killed again and again at random moments; no message is lost or doubled."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import sluice

CHILD = Path(__file__).with_name("mover_child.py")
MESSAGES = 3000

pytestmark = pytest.mark.slow


def _drain(db: sluice.Database, queue: str) -> list[int]:
    out: list[int] = []
    while True:
        with db.transaction() as tx:
            taken = tx.dequeue(queue, limit=1000)
            out.extend(m.body["n"] for m in taken)
        if not taken:
            return out


def test_repeated_kill_9_loses_nothing_and_doubles_nothing(shared_url: str) -> None:
    url = shared_url
    with sluice.connect(url) as db:
        db.create_queue("in")
        db.create_queue("done")
        db.queue("in").put_many([{"n": n} for n in range(MESSAGES)])
    rng = random.Random(7)
    kills = 0
    for seed in range(12):
        with subprocess.Popen(
            [sys.executable, str(CHILD), url, str(seed)], stdout=subprocess.PIPE, text=True
        ) as child:
            assert child.stdout is not None
            finished = False
            for _ in range(rng.randint(1, 15)):  # let it commit a few transactions
                line = child.stdout.readline().strip()
                if line in ("", "empty"):
                    finished = True
                    break
            if not finished:
                child.send_signal(signal.SIGKILL)
                kills += 1
            child.wait()
        with sluice.connect(url) as db:  # the next process recovers the dead one
            stats = db.queue("in").stats()
            assert stats["claimed"] == 0
            assert stats["pending"] == 0
            assert db.queue("done").stats()["pending"] == 0
    assert kills >= 5
    with sluice.connect(url) as db:
        left = _drain(db, "in")
        done = _drain(db, "done")
    assert done, "the movers committed nothing"
    counts = Counter(left + done)
    assert set(counts) == set(range(MESSAGES))
    assert max(counts.values()) == 1
