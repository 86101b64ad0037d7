"""A consumer that reports when it holds each message: argv = database URL, queue, count.

It polls the database only every 30 s, so a quick wake-up can only come from the
file watcher. Prints "ready" when blocked on the next message is what comes
next, then the ``time.time()`` at which it held the message.
"""

from __future__ import annotations

import sys
import time

import sluice


def main() -> None:
    url, queue, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with sluice.connect(url, poll_interval=30) as db:
        for _ in range(count):
            print("ready", flush=True)
            with db.transaction() as tx:
                taken = tx.dequeue(queue, wait=20)
                held = time.time()
            print(held if taken else "none", flush=True)


if __name__ == "__main__":
    main()
