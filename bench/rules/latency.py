"""Latency of ``bench.rules`` on an idle system: an order's arrival to its routed message.

In one process: the rules engine runs in its background thread (``db.rules.start()``), a
consumer thread loops ``tx.dequeue("billing", wait=...)`` and notes ``time.perf_counter()``
as soon as dequeue returns a message, and the main thread puts one order at a time into
``orders`` (``Queue.put``: enqueue and commit), notes the time when put returns, and waits
for the consumer to have committed before the next gap (a random 15-25 ms) and order. The
latency of an order is the consumer's time minus put's return: the engine's wake-up, its
transaction (evaluate, enqueue three messages, mark the order processed, commit) and the
consumer's wake-up. The same measurement with the order put straight into ``billing`` and
no engine (``direct``) shows the part of it that is the consumer's wake-up alone.

The issue's target is arrival to actions committed: the engine tells of each committed
batch (``db.rules.start(on_batch=...)``, called right after the commit returns), and
``committed`` holds put's return to that moment, per order.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

import sluice
from bench.harness import summarize

__all__ = ["Latency", "measure"]

WAIT = 0.5
"""The consumer's dequeue wait: it is woken by the commit, long before that."""
GAP = (0.015, 0.025)


@dataclass
class Latency:
    """One path's samples (seconds) and what went missing."""

    path: str
    samples: list[float] = field(default_factory=list)
    lost: int = 0
    committed: list[float] = field(default_factory=list)
    """Engine path: put's return to the engine's commit of the order's actions."""

    def summary(self) -> dict[str, float]:
        return summarize(self.samples)

    def committed_summary(self) -> dict[str, float]:
        return summarize(self.committed) if self.committed else {}


class _Consumer(threading.Thread):
    """Takes billing's messages one transaction at a time; notes when each came."""

    def __init__(self, db: sluice.Database) -> None:
        super().__init__(name="bench-rules-consumer", daemon=True)
        self.db = db
        self.woke: dict[int, float] = {}
        self.acked = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                with self.db.transaction() as tx:
                    msgs = tx.dequeue("billing", wait=WAIT)
                    now = time.perf_counter()
                    for m in msgs:
                        assert isinstance(m.body, dict)
                        self.woke[int(m.body["order"])] = now
                if msgs:
                    self.acked.set()  # committed: the consumer waits in dequeue again
        except BaseException as exc:  # reported by measure(), never lost in the thread
            self.error = exc


def measure(db: sluice.Database, *, n: int, warmup: int, direct: bool, seed: int = 7) -> Latency:
    """``n`` samples after ``warmup`` on ``db`` (ROUTING applied), through the engine or not."""
    rng = random.Random(seed)
    out = Latency("direct put into billing" if direct else "rules engine")
    consumer = _Consumer(db)
    consumer.start()
    current = [-1]  # the order in flight: set before its put, so no commit comes first
    committed: dict[int, float] = {}

    def on_batch(queue: str, result: object) -> None:
        if queue == "orders":
            committed.setdefault(current[0], time.perf_counter())

    if not direct:
        db.rules.start(on_batch=on_batch)
    sent: dict[int, float] = {}
    try:
        orders, billing = db.queue("orders"), db.queue("billing")
        for i in range(warmup + n):
            consumer.acked.clear()
            time.sleep(rng.uniform(*GAP))
            current[0] = i
            if direct:
                billing.put({"order": i, "total": 1.0})
            else:
                orders.put({"id": i, "total": 1.0})
            sent[i] = time.perf_counter()
            if not consumer.acked.wait(5.0):
                out.lost += 1
            if consumer.error is not None:
                raise RuntimeError(f"the consumer failed: {consumer.error!r}")
    finally:
        if not direct:
            db.rules.stop(timeout=10.0)
        consumer.stop.set()
        consumer.join(10.0)
    out.samples = [consumer.woke[i] - sent[i] for i in range(warmup, warmup + n)
                   if i in consumer.woke]  # fmt: skip
    out.committed = [committed[i] - sent[i] for i in range(warmup, warmup + n)
                     if i in committed]  # fmt: skip
    return out
