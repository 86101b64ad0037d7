"""Demaq's procurement process on sluice's rules engine (docs/rules.md).

``procurement.rules`` (beside this module, package data; ``examples/procurement/``
runs it too) is the application. This module plays everyone outside it: customers who ask for
offers, order and pay, the supplier who answers availability requests, and time,
on a ManualClock moved a month ahead so that the payment reminders fall due. It
returns what every queue holds at the end, what retention removed, and the checks
that the process did what the paper says it does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import sluice
from sluice.clock import ManualClock
from sluice.message import XML
from sluice.rules.engine import RunStats

__all__ = [
    "ProcurementReport",
    "Workload",
    "application",
    "format_procurement",
    "queue_contents",
    "run_procurement_demo",
    "run_procurement_workload",
]

START = 1_767_225_600.0  # 2026-01-01 00:00 UTC
DAY = 86_400.0


def application() -> str:
    """The procurement application's definition text."""
    return resources.files("sluice.demo").joinpath("procurement.rules").read_text("utf-8")


@dataclass(slots=True)
class ProcurementReport:
    customer: list[str] = field(default_factory=list)
    """Everything the customers received, in order: offers, refusals, reminders."""
    alerts: list[dict[str, Any]] = field(default_factory=list)
    queues: dict[str, int] = field(default_factory=dict)
    """Messages each queue of the application keeps at the end (any state)."""
    processed: int = 0
    removed: int = 0
    errors: int = 0
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(self.checks.values())


def _request(rid: str, customer: str | None, items: str) -> str:
    who = f' customer="{customer}"' if customer else ""
    return f'<offerRequest id="{rid}"{who}>{items}</offerRequest>'


def _processing(db: sluice.Database, m: sluice.Message) -> AbstractContextManager[object]:
    """With telemetry on, the supplier's answer is traced as its request's processing
    (docs/observability.md follows one request through it)."""
    if db.observer is None:
        return nullcontext()
    return db.observer.process(sluice.Destination(m.queue), [m], operation="process")


def _supplier_answers(db: sluice.Database) -> None:
    """The supplier: every availability request gets an answer with a price."""
    with db.transaction() as tx:
        for m in tx.dequeue("supplier", limit=100):
            request = str(m.body).split('request="', 1)[1].split('"', 1)[0]
            with _processing(db, m):
                answer = f'<supplierOK request="{request}" price="100"/>'
                tx.enqueue("checks", answer, content_type=XML)


def _received(db: sluice.Database) -> list[str]:
    with db.transaction() as tx:
        return [str(m.body) for m in tx.dequeue("customer", limit=100)]


Engine = Callable[[float], RunStats]
"""What runs the rules until nothing is due at a time: the local engine by default, or
Spark's (sluice.spark.rules.run_rules with now=)."""

_VARYING = ("created_at", "trigger_id")
"""System properties that name ids and times: they differ between two databases."""


def _settle(db: sluice.Database, engine: Engine | None, clock: ManualClock) -> RunStats:
    """Run the rules until nothing is due now: locally, or by ``engine``."""
    return db.rules.run_until_idle() if engine is None else engine(clock.now())


def queue_contents(db: sluice.Database) -> dict[str, list[str]]:
    """Every queue of the application's messages in any state, ids and times aside, in a
    canonical order: what two engines' runs of the same workload compare."""
    found: dict[str, list[str]] = {}
    for name in sorted(db.rules.application.queues):
        messages = []
        for state in ("ready", "delayed", "claimed", "expired", "failed", "done"):
            for m in db.queue(name).browse(limit=10_000_000, state=state):
                props = {k: v for k, v in m.properties.items() if k not in _VARYING}
                messages.append(json.dumps([state, m.body, props, m.content_type], sort_keys=True))
        found[name] = sorted(messages)
    return found


def run_procurement_demo(db: sluice.Database, *, engine: Engine | None = None) -> ProcurementReport:
    """Run the process on ``db`` (its clock is set to a manual one); what happened."""
    clock = ManualClock(START)
    db.clock = clock
    db.apply(application())
    report = ProcurementReport()
    offers = db.queue("offerRequests")

    def settle() -> None:
        stats = _settle(db, engine, clock)
        report.processed += stats.processed
        report.removed += stats.removed
        report.errors += stats.errors

    # Day 0: four requests. r2 asks for an export-controlled item, r3 names no
    # customer, r5 asks for half a unit (the supplier's property refuses it).
    item = '<item sku="A-1" qty="3"/>'
    offers.put(_request("r1", "c1", item), content_type=XML)
    offers.put(
        _request("r2", "c2", '<item sku="X-9" qty="1" export="controlled"/>'), content_type=XML
    )
    offers.put(_request("r3", None, item), content_type=XML)
    offers.put(_request("r4", "c3", item), content_type=XML)
    offers.put(_request("r5", "c4", '<item sku="A-1" qty="1.5"/>'), content_type=XML)
    settle()
    _supplier_answers(db)
    settle()
    report.customer += _received(db)
    # c1 and c3 order; c1 pays within the month, c3 does not.
    orders = db.queue("purchaseOrders")
    orders.put('<order request="r1" customer="c1" price="100"/>', content_type=XML)
    orders.put('<order request="r4" customer="c3" price="100"/>', content_type=XML)
    settle()
    clock.advance(10 * DAY)
    db.queue("payments").put('<payment invoice="inv-r1" amount="100"/>', content_type=XML)
    settle()
    # A month after the invoices: the echo queue brings them back.
    clock.advance(21 * DAY)
    settle()
    report.customer += _received(db)
    # c3 is overdue now: a new request is refused by finance.
    offers.put(_request("r6", "c3", item), content_type=XML)
    settle()
    _supplier_answers(db)
    settle()
    report.customer += _received(db)
    with db.transaction() as tx:
        report.alerts = [m.body for m in tx.dequeue("adminAlerts", limit=100)]
    for name in sorted(db.rules.application.queues):
        stats = db.queue(name).stats()
        report.queues[name] = sum(stats.values())
    report.checks = _checks(report)
    return report


def _checks(report: ProcurementReport) -> dict[str, bool]:
    got = report.customer
    kinds = [text.split(" ", 1)[0].lstrip("<") for text in got]
    return {
        "offers to r1 and r4": sum('request="r1"' in t and t.startswith("<offer") for t in got) == 1
        and sum('request="r4"' in t and t.startswith("<offer") for t in got) == 1,
        "r2 refused by legal": any(
            t.startswith("<refusal") and "r2" in t and "legalRefused" in t for t in got
        ),
        "r3 refused: no customer": any("r3" in t and "no customer given" in t for t in got),
        "one reminder, for the unpaid inv-r4": kinds.count("reminder") == 1
        and any('invoice="inv-r4"' in t for t in got if t.startswith("<reminder")),
        "r6 refused by finance": any(
            t.startswith("<refusal") and "r6" in t and "financeRefused" in t for t in got
        ),
        "r5's failure went to crmErrors and deadLink alerted": len(report.alerts) == 1
        and report.alerts[0]["rule"] == "forkRequest",
        "answered requests were removed": report.queues["offerRequests"] == 1
        and report.queues["checks"] == 0,
        "the paid invoice was removed, the unpaid one kept": report.queues["invoices"] == 1
        and report.queues["payments"] == 0,
    }


def format_procurement(report: ProcurementReport) -> str:
    lines = ["procurement (Demaq's example on sluice rules):"]
    lines += [f"  customer received: {text}" for text in report.customer]
    lines += [f"  admin alert: {alert}" for alert in report.alerts]
    kept = ", ".join(f"{q} {n}" for q, n in report.queues.items() if n)
    lines.append(
        f"  {report.processed} messages processed, {report.errors} error(s), "
        f"{report.removed} removed by retention; kept: {kept}"
    )
    lines += [f"  [{'ok' if ok else 'FAILED'}] {name}" for name, ok in report.checks.items()]
    return "\n".join(lines)


@dataclass(slots=True)
class Workload:
    """What a generated procurement workload did: per phase, seconds and what the engine
    reported."""

    requests: int
    phases: list[tuple[str, float, RunStats]] = field(default_factory=list)


def run_procurement_workload(
    db: sluice.Database, requests: int, *, seed: int = 7, engine: Engine | None = None
) -> Workload:
    """Demaq's process under load: ``requests`` offer requests with random outcomes.

    A tenth of the customers have an overdue invoice (finance refuses them), some items
    are export-controlled (legal refuses; never for an overdue customer, so that no
    request has two refusals whose order of arrival would decide the answer), a twentieth
    of the requests name no customer, a fiftieth ask for half a unit (an error message),
    and the supplier refuses a sixth. Then a third of the offers are ordered, half of
    those invoices paid within ten days, and a month passes: the unpaid ones are
    reminded. Every outcome follows from the messages, whatever order the engine takes
    its queues in. ``engine`` as for run_procurement_demo.
    """
    import random  # noqa: PLC0415  (only the workload draws)
    import time  # noqa: PLC0415

    rng = random.Random(seed)  # noqa: S311  (a workload, not a secret)
    clock = ManualClock(START)
    db.clock = clock
    db.apply(application())
    load = Workload(requests)

    def settle(phase: str) -> None:
        started = time.perf_counter()
        stats = _settle(db, engine, clock)
        load.phases.append((phase, time.perf_counter() - started, stats))

    customers = max(10, requests // 5)
    overdue = {f"c{n}" for n in range(customers) if n % 10 == 3}
    with db.transaction() as tx:
        for customer in sorted(overdue):
            tx.enqueue(
                "overdue",
                f'<overdue invoice="old-{customer}"/>',
                content_type=XML,
                properties={"customerID": customer},
            )
    offers, answers = [], []
    for n in range(requests):
        rid = f"r{n}"
        asker = None if rng.random() < 0.05 else f"c{rng.randrange(customers)}"
        qty = "1.5" if rng.random() < 0.02 else str(rng.randint(1, 9))
        controlled = asker not in overdue and rng.random() < 0.1
        export = ' export="controlled"' if controlled else ""
        offers.append(_request(rid, asker, f'<item sku="S-{n % 97}" qty="{qty}"{export}/>'))
        if rng.random() < 1 / 6:
            answers.append(f'<supplierRefused request="{rid}"/>')
        else:
            answers.append(f'<supplierOK request="{rid}" price="{rng.randint(50, 500)}"/>')
    # The supplier answered ahead of the request's own checks: its answer's place among
    # a request's checks is the same on every engine.
    db.queue("checks").put_many(answers, content_type=XML)
    db.queue("offerRequests").put_many(offers, content_type=XML)
    settle("requests")
    while True:  # the supplier takes its requests: it answered them already
        with db.transaction() as tx:
            if not tx.dequeue("supplier", limit=1000):
                break
    accepted = sorted(
        m.body.split('request="', 1)[1].split('"', 1)[0]
        for m in db.queue("customer").browse(limit=10 * requests)
        if str(m.body).startswith("<offer ")
    )
    ordered = [rid for rid in accepted if rng.random() < 1 / 3]
    orders = [
        f'<order request="{rid}" customer="c{rng.randrange(customers)}" price="100"/>'
        for rid in ordered
    ]
    db.queue("purchaseOrders").put_many(orders, content_type=XML)
    settle("orders")
    clock.advance(10 * DAY)
    paid = [rid for rid in ordered if rng.random() < 0.5]
    payments = [f'<payment invoice="inv-{rid}" amount="100"/>' for rid in paid]
    db.queue("payments").put_many(payments, content_type=XML)
    settle("payments")
    clock.advance(21 * DAY)
    settle("reminders")
    return load
