"""A consumer process for the randomized isolation test: threads move messages from "in"
to "done" in transactions that take random counts and abort at random.

Each committed transaction enqueues, in the same transaction, one receipt per message
it took, naming the transaction. On a blockwise queue a commit refused mid-block
carries on taking. Run: isolation_worker.py URL SEED THREADS STOPFILE.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import sluice


def consume(db: sluice.Database, rng: random.Random, stopfile: str) -> None:
    while True:
        tx = db.begin()
        taken = tx.dequeue("in", limit=rng.randint(1, 5), wait=0.1)
        if not taken:
            tx.abort()
            if os.path.exists(stopfile) and db.queue("in").stats()["ready"] == 0:
                return
            continue
        recorded = 0
        while not tx.closed:
            if rng.random() < 0.1:
                tx.abort()  # midway, perhaps with part of a block
                break
            time.sleep(rng.random() * 0.005)  # the work: lets transactions overlap
            tx.enqueue_many("done", [receipt(tx, m) for m in taken[recorded:]])
            recorded = len(taken)
            try:
                tx.commit()
            except sluice.IncompleteBlock:
                # Not at a block boundary: the transaction is open; take more.
                more = tx.dequeue("in", limit=rng.randint(1, 3))
                if not more:
                    raise
                taken += more


def receipt(tx: sluice.Transaction, m: sluice.Message) -> dict[str, object]:
    return dict(m.body, ref=m.ref, tx=tx.id, group=m.group)


def main() -> None:
    url, seed, threads, stopfile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with sluice.connect(url) as db:
        workers = [
            threading.Thread(target=consume, args=(db, random.Random(seed * 100 + i), stopfile))
            for i in range(threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()


if __name__ == "__main__":
    main()
