"""The workload of ``bench.content``: the orders, the ledger of what each queue holds,
and the records a run keeps."""

from __future__ import annotations

import json
import random
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.harness import PG_CONNINFO

QUEUE = "orders"  # typed, priority function, declared property: items 1 and 2
PLAIN_QUEUE = "orders_plain"  # untyped, nothing declared: item 4
TYPE = "OrderMessage"
PRIORITY = "sum(body.lines, l -> l.price * l.amout)"
PROPERTY = ("customer", "body.customer.name")
ORDER_BY = ["body.total DESC"]
CUSTOMERS = 10_000  # customer 0 is Smith
REGIONS = ("north", "south", "east", "west")
PRODUCTS = ("bolt", "nut", "washer", "hinge", "bracket", "rivet", "spring", "gasket")
DEFAULT_PG_URL = f"{PG_CONNINFO}?schema=bench_content"
BACKENDS = ("sqlite", "postgresql")
TARGET_P50_MS = 2.0
TARGET_PRIORITY_COST = 0.20

# Item 3's queues: (label, create_queue options). The first two are the comparison asked for.
THROUGHPUT: tuple[tuple[str, dict[str, Any]], ...] = (
    ("typed + priority function", {"types": [TYPE], "priority": {TYPE: PRIORITY}}),
    ("typed, no priority function", {"types": [TYPE]}),
    ("untyped + priority function (reference)", {"priority": {"*": PRIORITY}}),
    ("untyped, nothing declared (reference)", {}),
)


# ------------------------------------------------------------------------------ the orders


def customer_name(k: int) -> str:
    return "Smith" if k == 0 else f"customer-{k:05d}"


CUSTOMER_INDEX = {customer_name(k): k for k in range(CUSTOMERS)}


def make_order(number: int, rng: random.Random) -> dict[str, Any]:
    """One OrderMessage body of about 400 bytes, with customer, region and total besides."""
    lines: list[dict[str, Any]] = []
    for line_no in range(1, rng.randint(1, 3) + 1):
        items = [
            {
                "id": f"I{rng.randint(1, 99_999):05d}",
                "name": rng.choice(PRODUCTS),
                "ean": rng.randint(4_000_000_000_000, 4_999_999_999_999),
            }
            for _ in range(rng.randint(1, 2))
        ]
        lines.append(
            {
                "line_no": line_no,
                "amout": rng.randint(1, 9),
                "price": rng.randint(100, 20_000) / 100,
                "item": items,
            }
        )
    return {
        "id": number,
        "date": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "customer": {"name": customer_name(rng.randrange(CUSTOMERS))},
        "region": rng.choice(REGIONS),
        "total": round(sum(line["amout"] * line["price"] for line in lines), 2),
        "lines": lines,
    }


def order_batches(first: int, count: int, batch: int, seed: int) -> Iterator[list[dict[str, Any]]]:
    """Orders ``first`` .. ``first + count - 1`` in batches, always the same for a seed."""
    rng = random.Random(seed)
    for start in range(first, first + count, batch):
        yield [make_order(n, rng) for n in range(start, min(start + batch, first + count))]


class Ledger:
    """What the typed queue and the plain queue still hold, by order id (= body id)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.customer = array("H")
        self.total = array("d")
        self.region = bytearray()
        self.alive = bytearray(n)  # typed queue
        self.by_customer: list[set[int]] = [set() for _ in range(CUSTOMERS)]
        self.plain_count = array("l", [0] * CUSTOMERS)

    def add(self, body: dict[str, Any], *, plain: bool) -> None:
        k = CUSTOMER_INDEX[body["customer"]["name"]]
        self.customer.append(k)
        self.total.append(body["total"])
        self.region.append(REGIONS.index(body["region"]))
        self.alive[body["id"]] = 1
        self.by_customer[k].add(body["id"])
        if plain:
            self.plain_count[k] += 1

    def consume(self, number: int) -> None:
        self.alive[number] = 0
        self.by_customer[self.customer[number]].discard(number)

    def random_alive(self, rng: random.Random) -> int:
        while True:
            number = rng.randrange(self.n)
            if self.alive[number]:
                return number


# ------------------------------------------------------------------------------ results


@dataclass
class Timed:
    """Samples of one measurement, in seconds; ``scanned`` for the plain-queue alternative."""

    label: str
    samples: list[float] = field(default_factory=list)
    claim: list[float] = field(default_factory=list)  # the tx.dequeue call alone
    scanned: list[int] = field(default_factory=list)
    note: str = ""


@dataclass
class BackendRun:
    """Everything measured on one backend."""

    backend: str
    url: str
    n: int
    plain_n: int
    durability: str = ""
    storage: str = ""
    load: list[tuple[str, int, float]] = field(default_factory=list)  # (what, messages, s)
    selective: Timed = field(default_factory=lambda: Timed("customer"))
    ordered: Timed = field(default_factory=lambda: Timed("customer, order_by"))
    scans: list[Timed] = field(default_factory=list)
    alternative: Timed = field(default_factory=lambda: Timed("plain queue"))
    throughput: dict[str, tuple[int, float]] = field(default_factory=dict)  # label: (n, s)
    plans: list[tuple[str, list[str]]] = field(default_factory=list)
    surveys: list[tuple[str, dict[str, int], int]] = field(default_factory=list)
    analyzed: list[Timed] = field(default_factory=list)  # PostgreSQL: item 1 after ANALYZE
    pg_states: list[tuple[str, str]] = field(default_factory=list)  # (after phase, state)
    executed_plans: list[tuple[str, list[str]]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    phases: list[tuple[str, float, float, float]] = field(default_factory=list)
    """(phase, seconds, 1-minute load average at its start, at its end)"""
    wheres: set[str] = field(default_factory=set)

    @property
    def distinct_where(self) -> int:
        return len(self.wheres)

    error: str = ""


@dataclass(frozen=True)
class Settings:
    n: int
    plain_n: int
    typed_load: int
    load_batch: int
    samples: int
    scan_samples: int
    scan_budget: float
    throughput_n: int
    throughput_batch: int
    alt_samples: int
    alt_budget: float
    alt_batch: int
    seed: int


def body_size(seed: int) -> int:
    sample = next(order_batches(0, 2_000, 2_000, seed))
    return sum(len(json.dumps(b)) for b in sample) // len(sample)
