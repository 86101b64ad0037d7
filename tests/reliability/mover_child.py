"""Moves messages from "in" to "done", a transaction at a time, until killed.

Prints a line after each commit so the test can kill it at a random moment,
often in the middle of the next transaction or its commit.
"""

from __future__ import annotations

import random
import sys

import sluice


def main() -> None:
    url, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    db = sluice.connect(url)
    while True:
        with db.transaction() as tx:
            taken = tx.dequeue("in", limit=rng.randint(1, 20))
            if not taken:
                break
            for m in taken:
                tx.enqueue("done", {"n": m.body["n"]})
            if rng.random() < 0.2:
                tx.abort()
                continue
        print(len(taken), flush=True)
    print("empty", flush=True)
    db.close()


if __name__ == "__main__":
    main()
