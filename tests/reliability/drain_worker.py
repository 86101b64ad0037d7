"""A consumer process for the concurrency test: threads move messages from "in" to "done".

Each transaction takes a few messages and enqueues a receipt for each into
"done"; some transactions abort at random. Run: drain_worker.py URL SEED THREADS.
"""

from __future__ import annotations

import random
import sys
import threading

import sluice


def consume(db: sluice.Database, rng: random.Random) -> None:
    idle = 0
    while idle < 3:
        with db.transaction() as tx:
            taken = tx.dequeue("in", limit=rng.randint(1, 10), wait=0.2)
            if not taken:
                idle += 1
                continue
            idle = 0
            for m in taken:
                tx.enqueue("done", {"n": m.body["n"], "attempts": m.attempts})
            if rng.random() < 0.1:
                tx.abort()


def main() -> None:
    url, seed, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with sluice.connect(url) as db:
        workers = [
            threading.Thread(target=consume, args=(db, random.Random(seed * 100 + i)))
            for i in range(threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()


if __name__ == "__main__":
    main()
