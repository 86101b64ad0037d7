"""A reader that takes messages in a transaction, reports them, and waits to be killed.

Run by the isolation tests: argv = database URL, queue, how many to take.
"""

from __future__ import annotations

import json
import sys

import sluice


def main() -> None:
    url, queue, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    db = sluice.connect(url)
    tx = db.begin()
    taken = [m.body for m in tx.dequeue(queue, limit=limit)]
    print(json.dumps({"session": db.session, "taken": taken}), flush=True)
    sys.stdin.readline()  # killed here


if __name__ == "__main__":
    main()
