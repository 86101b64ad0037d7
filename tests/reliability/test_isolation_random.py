"""Randomized concurrent runs per isolation level and for groups, on SQLite and PostgreSQL.

Four writers (sessions, in threads here) commit and abort transactions of random
size while consumer processes of two threads each take random counts, abort at
random, and one of them is killed with SIGKILL now and then and replaced. Every
commit records receipts for what it took, in the same transaction, so the
receipts in commit order are the history to check:

- no message is lost or committed twice, and nothing aborted shows;
- ``ordered``: each writer's messages in its order; ``blockwise``: each block
  committed by one transaction; ``ordered_blockwise``: both;
- groups: each group's messages in enqueue order.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import sluice

WORKER = Path(__file__).with_name("isolation_worker.py")
WRITERS = 4
BLOCKS = 50  # transactions per writer

pytestmark = pytest.mark.slow


def produce(url: str, writer: int, grouped: bool, done: list[tuple[int, int, int]]) -> None:
    """Commit BLOCKS transactions of 1-4 messages; every fifth one aborted instead."""
    rng = random.Random(writer)
    with sluice.connect(url) as db:
        seq = 0
        for t in range(BLOCKS):
            size = rng.randint(1, 4)
            tx = db.begin()
            for k in range(size):
                group = f"g{rng.randint(0, 5)}" if grouped else None
                body = {"w": writer, "t": t, "k": k, "n": seq + k, "size": size}
                tx.enqueue("in", body, group=group)
            if t % 5 == 4:
                tx.abort()
                continue
            tx.commit()
            done.extend((writer, t, k) for k in range(size))
            seq += size
            time.sleep(rng.random() * 0.01)  # writers spread over the consumers' run


@pytest.mark.parametrize("level", ["ordered", "blockwise", "ordered_blockwise", "groups"])
def test_random_concurrent_runs_keep_the_levels_promises(
    shared_url: str, tmp_path: Path, level: str
) -> None:
    url = shared_url
    with sluice.connect(url) as db:
        db.create_queue("in", isolation="none" if level == "groups" else level)  # type: ignore[arg-type]
        db.create_queue("done")
    stop = tmp_path / "stop"
    made: list[tuple[int, int, int]] = []
    writers = [
        threading.Thread(target=produce, args=(url, w, level == "groups", made))
        for w in range(WRITERS)
    ]
    for w in writers:
        w.start()

    def consumer(seed: int) -> subprocess.Popen[Any]:
        return subprocess.Popen([sys.executable, str(WORKER), url, str(seed), "2", str(stop)])

    consumers = [consumer(seed) for seed in range(3)]
    rng = random.Random(level)
    kills = 0
    for seed in range(3, 6):  # kill one at a random moment, start another in its place
        time.sleep(rng.uniform(0.3, 1.0))  # a random moment of the run
        victim = consumers.pop(rng.randrange(len(consumers)))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        kills += 1
        consumers.append(consumer(seed))
    for w in writers:
        w.join()
    stop.touch()
    for c in consumers:
        assert c.wait(120) == 0

    with sluice.connect(url) as db:
        db.recover()
        assert db.queue("in").stats() == dict.fromkeys(
            ("ready", "delayed", "pending", "claimed", "expired", "failed", "done"), 0
        )
        receipts: list[dict[str, Any]] = []
        while True:
            with db.transaction() as tx:
                batch = [m.body for m in tx.dequeue("done", limit=1000)]
            receipts += batch
            if not batch:
                break
    assert kills == 3
    check_history(level, receipts, made)


def check_history(
    level: str, receipts: list[dict[str, Any]], made: list[tuple[int, int, int]]
) -> None:
    """The receipts, in commit order, against the level's promises."""
    # Nothing lost, nothing twice, nothing aborted.
    seen = Counter((r["w"], r["t"], r["k"]) for r in receipts)
    assert max(seen.values()) == 1
    assert set(seen) == set(made)

    if level in ("ordered", "ordered_blockwise"):
        by_writer: dict[int, list[int]] = defaultdict(list)
        for r in receipts:
            by_writer[r["w"]].append(r["n"])
        for writer, numbers in by_writer.items():
            assert numbers == sorted(numbers), f"writer {writer} out of order"
    if level in ("blockwise", "ordered_blockwise"):
        committers: dict[tuple[int, int], set[str]] = defaultdict(set)
        for r in receipts:
            committers[(r["w"], r["t"])].add(r["tx"])
        split = {block: txs for block, txs in committers.items() if len(txs) > 1}
        assert not split, f"blocks committed in parts: {split}"
    if level == "groups":
        by_group: dict[str, list[int]] = defaultdict(list)
        for r in receipts:
            by_group[r["group"]].append(r["ref"])
        for group, refs in by_group.items():
            assert refs == sorted(refs), f"group {group} out of order"
