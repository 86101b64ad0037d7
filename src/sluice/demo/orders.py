"""The orders example of ``sluice demo`` (JPMQ, Sect. 3.4): orders of JPMQ's
OrderMessage type, a priority function on the order total, and a consumer that
takes "the orders of customer Smith, the one with most items first" in one
transaction. The summary checks the outcome from the queue itself."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import sluice

__all__ = ["ORDER_TYPE", "OrdersReport", "run_orders_demo"]

ORDER_TYPE = """
DEFINE MESSAGETYPE OrderMessage;
NODE order;
id: IDENT; date: DATE; lines: REFERENCE TO order_line;
END;
NODE order_line;
line_no: INTEGER; amout: INTEGER; price: REAL; item: REFERENCE TO item;
END;
NODE item;
id: IDENT; name: STRING; ean: INTEGER;
END;
ROOT order;
END;
"""

QUEUE = "shop.orders"
TOTAL = "sum(body.lines, l -> l.amout * l.price)"
ITEMS = "sum(body.lines, l -> count(l.item))"  # items across all order lines
CUSTOMERS = ("Smith", "Jones", "Miller", "Brown")


@dataclass
class OrdersReport:
    """What the orders example did and what it verified."""

    orders: int = 0
    refused: str = ""
    priorities_are_totals: bool = False
    smith_orders: int = 0
    taken: list[tuple[int, int]] = field(default_factory=list)
    """(order id, items) in the order the consumer got them."""
    most_items_first: bool = False
    others_untouched: bool = False

    @property
    def ok(self) -> bool:
        return (
            bool(self.refused)
            and self.priorities_are_totals
            and len(self.taken) == self.smith_orders > 0
            and self.most_items_first
            and self.others_untouched
        )


def _order(number: int, customer: str, rng: random.Random) -> dict[str, Any]:
    lines = []
    for line_no in range(1, rng.randint(1, 4) + 1):
        items = [
            {"id": f"I{rng.randint(1, 99)}", "name": "bolt", "ean": 4006381333931}
            for _ in range(rng.randint(1, 5))
        ]
        lines.append(
            {
                "line_no": line_no,
                "amout": rng.randint(1, 9),
                "price": rng.choice([2.5, 9.9, 120.0]),
                "item": items,
            }
        )
    return {"id": number, "date": "2026-11-22", "customer": {"name": customer}, "lines": lines}


def _items(order: dict[str, Any]) -> int:
    return sum(len(line["item"]) for line in order["lines"])


def run_orders_demo(db: sluice.Database, *, count: int = 40, seed: int = 7) -> OrdersReport:
    """Run the example on ``db`` (which must not have the queue yet)."""
    report = OrdersReport()
    db.create_type(jpmq=ORDER_TYPE)
    queue = db.create_queue(QUEUE, types=["OrderMessage"], priority={"OrderMessage": TOTAL})
    db.create_property("customer", "body.customer.name", queues=[QUEUE])
    rng = random.Random(seed)  # noqa: S311  (a demo's data, not a secret)
    orders = [_order(n, CUSTOMERS[n % len(CUSTOMERS)], rng) for n in range(1, count + 1)]
    queue.put_many(orders)
    report.orders = len(orders)
    try:
        queue.put({"id": 0, "date": "yesterday", "lines": []})
    except sluice.TypeViolation as exc:
        report.refused = str(exc)

    totals = {o["id"]: sum(line["amout"] * line["price"] for line in o["lines"]) for o in orders}
    stored = queue.browse(limit=count)
    report.priorities_are_totals = all(
        m.priority == int(totals[m.body["id"]] + 0.5) for m in stored
    )

    smith = [o for o in orders if o["customer"]["name"] == "Smith"]
    report.smith_orders = len(smith)
    with db.transaction() as tx:  # the selective ordering dequeue, in the database
        taken = tx.dequeue(
            QUEUE, where="customer = 'Smith'", order_by=[f"{ITEMS} DESC"], limit=count
        )
        report.taken = [(m.body["id"], _items(m.body)) for m in taken]
    counts = [items for _, items in report.taken]
    report.most_items_first = counts == sorted(counts, reverse=True)
    left = {m.body["id"] for m in queue.browse(limit=count)}
    report.others_untouched = left == {o["id"] for o in orders if o not in smith}
    return report


def format_orders(report: OrdersReport) -> str:
    check = {True: "ok", False: "FAILED"}
    taken = ", ".join(f"#{n} ({items} items)" for n, items in report.taken)
    return "\n".join(
        [
            f"  orders example: {report.orders} OrderMessage orders (JPMQ type), "
            f"a malformed one refused: {check[bool(report.refused)]}",
            f"  priority function on the order total: {check[report.priorities_are_totals]}",
            f"  Smith's orders, most items first, in one transaction: {taken}  "
            f"{check[report.most_items_first and len(report.taken) == report.smith_orders]}",
            f"  other customers' orders left in place: {check[report.others_untouched]}",
        ]
    )
