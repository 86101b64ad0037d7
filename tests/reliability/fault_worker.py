"""A producer or consumer that carries on through PostgreSQL faults, logging what it knows.

Run: fault_worker.py URL produce NAME COUNT LOG  or  fault_worker.py URL consume NAME STOPFILE LOG.
Each line of LOG is "ok BODY" (committed) or "unknown BODY" (the commit's outcome was
lost with the connection). Producers also commit and abort transactions whose
bodies start with "aborted-": those must never show anywhere.
"""

from __future__ import annotations

import os
import sys
import time

import sluice


def produce(db: sluice.Database, name: str, count: int, log: str) -> None:
    with open(log, "a", buffering=1) as out:
        for n in range(count):
            body = f"{name}-{n}"
            try:
                with db.transaction() as tx:
                    tx.enqueue("in", body)
                out.write(f"ok {body}\n")
            except sluice.StorageError:
                out.write(f"unknown {body}\n")
                time.sleep(0.05)  # the server is away; give it a moment
            if n % 10 == 0:
                try:
                    tx = db.begin()
                    tx.enqueue("in", f"aborted-{body}")
                    tx.abort()
                except sluice.StorageError:
                    pass


def consume(db: sluice.Database, stopfile: str, log: str) -> None:
    with open(log, "a", buffering=1) as out:
        while True:
            bodies: list[str] = []
            try:
                with db.transaction() as tx:
                    bodies = [m.body for m in tx.dequeue("in", limit=5, wait=0.2)]
                out.writelines(f"ok {b}\n" for b in bodies)
            except sluice.StorageError:
                out.writelines(f"unknown {b}\n" for b in bodies)
                time.sleep(0.05)
                continue
            if not bodies and os.path.exists(stopfile):
                return


def main() -> None:
    url, mode, name, arg, log = sys.argv[1:6]
    with sluice.connect(url) as db:
        if mode == "produce":
            produce(db, name, int(arg), log)
        else:
            consume(db, arg, log)


if __name__ == "__main__":
    main()
