"""A process whose wall clock the test steps (libfaketime): python clock_child.py URL.

Reads commands from stdin, one a line, and answers each with a JSON line:
``put BODY`` (enqueue to "q"), ``take`` (the next message's body, or null, no waiting),
``now`` (the Database's clock).
"""

from __future__ import annotations

import json
import sys

import sluice


def main() -> None:
    db = sluice.connect(sys.argv[1])
    q = db.create_queue("q", exist_ok=True)
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        answer: object
        if command == "put":
            answer = q.put(arg)
        elif command == "take":
            m = q.get()
            answer = None if m is None else m.body
            if m is not None:
                m.ack()
        elif command == "now":
            answer = db.clock.now()
        else:
            answer = f"unknown command {command!r}"
        print(json.dumps(answer), flush=True)
    db.close()


if __name__ == "__main__":
    main()
