"""A process whose wall clock the test steps (libfaketime):
``python -m tests.reliability.clock_child URL``.

Reads commands from stdin, one a line, and answers each with a JSON line:
``put BODY`` (enqueue to "q"), ``take`` (the next message's body, or null, no waiting),
``now`` (the Database's clock), ``hold`` (take the next message in a transaction left
open: its body, or null), ``commit`` (commit it: "committed", or the error's class name).
"""

from __future__ import annotations

import json
import sys

import sluice


def main() -> None:
    db = sluice.connect(sys.argv[1])
    q = db.create_queue("q", exist_ok=True)
    print(json.dumps("ready"), flush=True)
    held: sluice.Transaction | None = None
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
        elif command == "hold":
            held = db.transaction()
            taken = held.dequeue("q")
            answer = taken[0].body if taken else None
        elif command == "commit":
            assert held is not None
            try:
                held.commit()
                answer = "committed"
            except sluice.SluiceError as exc:
                answer = type(exc).__name__
        else:
            answer = f"unknown command {command!r}"
        print(json.dumps(answer), flush=True)
    db.close()


if __name__ == "__main__":
    main()
