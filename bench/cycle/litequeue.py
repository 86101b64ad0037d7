"""Drives litequeue's ``LiteQueue`` through the cycle: put, then pop + done until empty.

litequeue sets ``synchronous = NORMAL`` itself on every queue it opens, with no option to change.
"""

from __future__ import annotations

import time
from pathlib import Path

import litequeue

from bench.cycle.matrix import Unsupported, observe
from bench.harness import encode, make_bodies

DRIVE = (
    "`litequeue.LiteQueue`: `put(json_text)` N times (autocommit INSERT), then `pop()`"
    " (`BEGIN IMMEDIATE` + `UPDATE ... RETURNING`) + `done(message_id)` (autocommit UPDATE)"
    " until `pop()` returns None; 3 transactions per cycle. `done` only sets status=2: rows stay"
    " until `prune()`. Its claim sorts every ready row (index on status only, ORDER BY"
    " message_id: a temp B-tree per pop), so its rate falls as the backlog grows."
    " The constructor runs `PRAGMA synchronous = NORMAL` (and WAL) on every"
    " connection, including one passed in, with no parameter to change it. `transaction()`"
    " could group puts, but `pop()` opens its own transaction, so claims cannot be batched."
)


def run(path: Path, n: int, batch: int, synchronous: str) -> float:
    """Put n messages, then pop and mark them done; return the seconds taken."""
    if batch != 1:
        raise Unsupported("litequeue pops one message per transaction")
    bodies = make_bodies(n)
    q = litequeue.LiteQueue(str(path / "litequeue.db"), queue_name="bench")
    try:
        got = 0
        start = time.perf_counter()
        for body in bodies:
            q.put(encode(body))
        while (message := q.pop()) is not None:
            q.done(message.message_id)
            got += 1
        elapsed = time.perf_counter() - start

        left = q.qsize()
        if got != n or left:
            raise RuntimeError(f"litequeue: popped {got} of {n} messages, {left} not done")
        note = "FULL not offered: forced NORMAL" if synchronous == "FULL" else ""
        observe(q.conn, note)
        return elapsed
    finally:
        q.close()
