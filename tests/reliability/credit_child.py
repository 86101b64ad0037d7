"""A consumer process for the credit test: threads move messages from a capped "in" to "done".

Each transaction takes a few messages, checks that the queue's claimed messages (all
processes' together) stay within the cap, holds them a moment, then enqueues a receipt
for each into "done" and commits; some abort. Run: credit_child.py URL CAP SEED THREADS.
Exits 1 if it ever saw more than CAP claimed.
"""

from __future__ import annotations

import random
import sys
import threading
import time

import sluice


def consume(db: sluice.Database, cap: int, rng: random.Random, seen: list[int]) -> None:
    probe = db.queue("in")
    while True:
        with db.transaction() as tx:
            taken = tx.dequeue("in", limit=rng.randint(1, 4), wait=0.5)
            if not taken:
                counts = probe.stats()
                if counts["ready"] + counts["claimed"] + counts["pending"] == 0:
                    return  # drained: nothing left, nothing held that could come back
                continue
            seen.append(probe.stats()["claimed"])
            time.sleep(rng.random() * 0.004)  # the work: others want credit meanwhile
            for m in taken:
                tx.enqueue("done", {"n": m.body["n"]})
            if rng.random() < 0.1:
                tx.abort()


def main() -> None:
    url, cap, seed, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    seen: list[int] = []
    with sluice.connect(url) as db:
        workers = [
            threading.Thread(target=consume, args=(db, cap, random.Random(seed * 100 + i), seen))
            for i in range(threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    print(max(seen, default=0))
    sys.exit(1 if max(seen, default=0) > cap else 0)


if __name__ == "__main__":
    main()
