"""A process that opens a transaction, reports where it stands, and waits to be killed or resumed.

Run by the reliability tests: argv = database URL, mode ("hold" or "commit-after-resume").
"""

from __future__ import annotations

import json
import sys

import sluice


def main() -> None:
    url, mode = sys.argv[1], sys.argv[2]
    db = sluice.connect(url, lease=0.3)
    db.queue("in").put("committed-by-child")
    tx = db.begin()
    taken = tx.dequeue("in", limit=3)
    tx.enqueue("out", "uncommitted-1")
    tx.enqueue("in", "uncommitted-2")
    tx.browse("in")  # writes the enqueues as pending rows, so a crash leaves them behind
    print(json.dumps({"session": db.session, "taken": [m.body for m in taken]}), flush=True)
    sys.stdin.readline()  # killed here, or stopped and resumed
    if mode == "commit-after-resume":
        try:
            tx.commit()
        except sluice.LeaseLost:
            print("lease-lost", flush=True)
        else:
            print("committed", flush=True)
    db.close()


if __name__ == "__main__":
    main()
