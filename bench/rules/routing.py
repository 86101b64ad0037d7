"""The routing workload of ``bench.rules``: one message in, three out, one computed property.

The same logic twice on a queue of N preloaded orders: the rule ``route`` (the ROUTING of
tests/contract/test_rules.py) run by ``db.rules.run_until_idle(batch=B)``, and a loop written
with sluice's Python API over the same queues and the same computed property (the definition
without the rule), taking k orders per transaction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import sluice

__all__ = [
    "DEFINITIONS",
    "ROUTING",
    "Timed",
    "check_routed",
    "hand",
    "load_orders",
    "rules",
]

DEFINITIONS = """
CREATE QUEUE orders;
CREATE QUEUE billing;
CREATE QUEUE shipping;
CREATE QUEUE audit;
CREATE PROPERTY total AS real QUEUE billing, shipping, audit VALUE body.total;
"""
"""The queues and the computed property, without the rule: what the hand-written loop uses."""

ROUTING = (
    DEFINITIONS
    + """
CREATE RULE route FOR orders
  IF body.total > 0 THEN
    ENQUEUE json_object('order', body.id, 'total', body.total) INTO billing,
    ENQUEUE json_object('order', body.id) INTO shipping,
    ENQUEUE json_object('order', body.id, 'seen', now()) INTO audit
  ELSE
    ENQUEUE json_object('refused', body.id) INTO audit;
"""
)

_LOAD_CHUNK = 1_000


@dataclass(frozen=True)
class Timed:
    """Messages processed and the seconds it took."""

    messages: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def load_orders(db: sluice.Database, n: int) -> None:
    """N orders with a positive total (each routed three ways), before timing starts."""
    orders = db.queue("orders")
    for start in range(0, n, _LOAD_CHUNK):
        end = min(start + _LOAD_CHUNK, n)
        orders.put_many([{"id": i, "total": 1.0 + (i % 997) * 1.5} for i in range(start, end)])


def rules(db: sluice.Database, n: int, batch: int) -> Timed:
    """The engine on the preloaded orders: one run_until_idle until every one is processed."""
    began = time.perf_counter()
    stats = db.rules.run_until_idle(batch=batch)
    seconds = time.perf_counter() - began
    if stats.processed != n or stats.errors:
        raise RuntimeError(f"the engine processed {stats.processed} of {n}, {stats.errors} errors")
    return Timed(n, seconds)


def hand(db: sluice.Database, n: int, k: int) -> Timed:
    """The same routing by hand: k orders per transaction, three enqueues each, commit."""
    done = 0
    began = time.perf_counter()
    while True:
        with db.transaction() as tx:
            msgs = tx.dequeue("orders", limit=k)
            for m in msgs:
                order = m.body
                assert isinstance(order, dict)
                if order["total"] > 0:
                    tx.enqueue("billing", {"order": order["id"], "total": order["total"]})
                    tx.enqueue("shipping", {"order": order["id"]})
                    tx.enqueue("audit", {"order": order["id"], "seen": time.time()})
                else:
                    tx.enqueue("audit", {"refused": order["id"]})
        if not msgs:
            break
        done += len(msgs)
    seconds = time.perf_counter() - began
    if done != n:
        raise RuntimeError(f"the loop took {done} orders of {n}")
    return Timed(n, seconds)


def check_routed(db: sluice.Database, n: int) -> None:
    """After a run: N messages ready in each target, the computed property on them."""
    for queue in ("billing", "shipping", "audit"):
        ready = db.queue(queue).stats()["ready"]
        if ready != n:
            raise RuntimeError(f"{queue} holds {ready} ready messages, not {n}")
    (first,) = db.queue("billing").browse(limit=1)
    if first.properties.get("total") != 1.0:
        raise RuntimeError(f"billing's computed property is missing: {first.properties}")
