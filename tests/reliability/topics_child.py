"""A process that holds a topic transaction open, reports where it stands, and waits to be killed.

Run by test_topics_crash.py: argv = database URL. It takes three messages of
subscription "a", publishes into the topic in the same (uncommitted) transaction,
and makes a non-durable subscription that must end with its session.
"""

from __future__ import annotations

import json
import sys

import sluice


def main() -> None:
    db = sluice.connect(sys.argv[1], lease=0.3)
    db.subscribe("events", "mine", durable=False)
    db.queue("events").put({"n": 100})
    tx = db.begin()
    taken = tx.dequeue("a", limit=3)
    tx.enqueue("events", {"n": 101})
    tx.enqueue("events", {"n": 102})
    tx.flush()  # written as pending rows, so a crash leaves them behind
    print(json.dumps({"session": db.session, "taken": [m.body for m in taken]}), flush=True)
    sys.stdin.readline()  # killed here
    tx.commit()
    db.close()


if __name__ == "__main__":
    main()
