"""The procurement workload of ``bench.rules``: Demaq's offer requests, by rules and by hand.

N offer requests (XML) go through the fork into finance, legal and the supplier, the finance
and legal checks, the supplier's answers (written by the bench, the same code for both) and
the join of the three answers per request into an offer or a refusal to the customer.

- rules: src/sluice/demo/procurement.rules as it ships, run by ``db.rules.run_until_idle(batch=B)``
  once for the fork and the first two answers of every request, and once more after the
  supplier answered.
- by hand: the same file without its rules (so the queues and the computed properties
  ``requestID``, ``customerID``, ``verdict`` and ``price`` are the same), plus a queue
  ``joinState`` with a declared, indexed property ``joinRequest`` (``db.create_property``):
  the join's state is kept in that queue, never in Python. Each department is a loop of
  transactions taking k messages each. The fork parses the request with lxml and enqueues
  the three documents and a ``request`` state message (the customer) into joinState. The
  finance check browses ``overdue`` with ``where="props.customerID = '...'"``. The join, per
  answer taken from ``checks``: browses joinState ``where="joinRequest = '<request>'"``; with
  fewer than three answers it enqueues the answer into joinState; with the third it dequeues
  the request's state messages with the same ``where`` (the slice's reset) and enqueues the
  offer or the refusal.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lxml import etree

import sluice
from sluice.demo.procurement import application
from sluice.message import XML

__all__ = [
    "CUSTOMERS",
    "OVERDUE",
    "Phases",
    "as_shipped",
    "by_hand",
    "by_rules",
    "check_answered",
    "definitions",
    "expected_offers",
    "load",
    "prepare_by_hand",
    "prepare_by_rules",
    "supplier",
]

CUSTOMERS = 500
OVERDUE = 10
"""Customers c0..c9 have an overdue invoice: their requests are refused by finance."""
CONTROLLED = 10
"""Every 10th request (i % 10 == 3) asks for an export-controlled item: legal refuses it."""

_REQUEST = re.compile(r'request="([^"]+)"')
_RULE = re.compile(r"^CREATE RULE .*?;", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Phases:
    """Seconds of one procurement run: the processing before and after the supplier."""

    requests: int
    first: float
    """The fork, the finance and legal checks and the join of their answers."""
    supplier: float
    """The bench's supplier answering every availability request (the same for both)."""
    second: float
    """The join of the supplier's answers: offers and refusals."""

    @property
    def processing(self) -> float:
        return self.first + self.second

    @property
    def rate(self) -> float:
        """Requests per second of processing (the supplier's time left out)."""
        return self.requests / self.processing

    @property
    def end_to_end(self) -> float:
        """Requests per second, the supplier's time included."""
        return self.requests / (self.processing + self.supplier)


def definitions() -> str:
    """procurement.rules without its rules: queues, properties, slicings, error queue."""
    return _RULE.sub("", application())


def load(db: sluice.Database, n: int) -> None:
    """The overdue invoices and N offer requests, before timing starts."""
    overdue = db.queue("overdue")
    for c in range(OVERDUE):
        overdue.put(f'<overdue invoice="old-{c}"/>', content_type=XML,
                    properties={"customerID": f"c{c}"})  # fmt: skip
    requests = db.queue("offerRequests")
    for start in range(0, n, 500):
        bodies = [_request(i) for i in range(start, min(start + 500, n))]
        requests.put_many(bodies, content_type=XML)


def _request(i: int) -> str:
    export = ' export="controlled"' if i % CONTROLLED == 3 else ""
    return (
        f'<offerRequest id="r{i}" customer="c{i % CUSTOMERS}">'
        f'<item sku="A-{i % 13}" qty="{1 + i % 4}"{export}/><item sku="B-1" qty="2"/>'
        "</offerRequest>"
    )


def expected_offers(n: int) -> int:
    return sum(1 for i in range(n) if i % CONTROLLED != 3 and i % CUSTOMERS >= OVERDUE)


def supplier(db: sluice.Database, k: int) -> int:
    """The supplier: every availability request gets its answer in checks, k per transaction."""

    def answer(tx: sluice.Transaction, m: sluice.Message) -> None:
        match = _REQUEST.search(str(m.body))
        assert match is not None
        request = match.group(1)
        price = 100 + int(request[1:]) % 7
        tx.enqueue("checks", f'<supplierOK request="{request}" price="{price}"/>',
                   content_type=XML)  # fmt: skip

    return _drain(db, "supplier", k, answer)


def by_rules(db: sluice.Database, n: int, batch: int) -> Phases:
    """The engine: run_until_idle, the supplier, run_until_idle."""
    began = time.perf_counter()
    first = db.rules.run_until_idle(batch=batch)
    first_s = time.perf_counter() - began
    began = time.perf_counter()
    answered = supplier(db, batch)
    supplier_s = time.perf_counter() - began
    began = time.perf_counter()
    second = db.rules.run_until_idle(batch=batch)
    second_s = time.perf_counter() - began
    errors = first.errors + second.errors
    if answered != n or errors:
        raise RuntimeError(f"supplier answered {answered} of {n}; {errors} rule errors")
    return Phases(n, first_s, supplier_s, second_s)


def by_hand(db: sluice.Database, n: int, k: int) -> Phases:
    """The hand-written process: fork, finance, legal, join; the supplier; join."""
    began = time.perf_counter()
    forked = _drain(db, "offerRequests", k, _fork)
    _drain(db, "finance", k, _finance)
    _drain(db, "legal", k, _legal)
    _drain(db, "checks", k, _join)
    first_s = time.perf_counter() - began
    began = time.perf_counter()
    answered = supplier(db, k)
    supplier_s = time.perf_counter() - began
    began = time.perf_counter()
    _drain(db, "checks", k, _join)
    second_s = time.perf_counter() - began
    if forked != n or answered != n:
        raise RuntimeError(f"forked {forked}, supplier answered {answered}, of {n}")
    return Phases(n, first_s, supplier_s, second_s)


SLICED = ("offerRequests", "checks")
"""The queues of the slicing requestMsgs: their processed messages are slice members."""

SHELTER = 86_400.0
"""A day, in seconds."""


def prepare_by_rules(db: sluice.Database, *, shelter: bool) -> None:
    """procurement.rules as it ships; ``shelter``: the core retention of SLICED set to a day.

    The queue engine's own removal of done messages (engine/retention.py, run with every
    upkeep: the lease keeper's ticks, ``db.recover()``, close) deletes what a queue settled
    past its core retention, which for queues made by ``apply`` is 0, whether a live slice
    holds it or not; the join then never sees the requests' first answers. A core retention
    of a day on the sliced queues keeps that sweep off them, so the throughput is measured
    on a run that answers every request (``as_shipped`` shows what happens without it).
    """
    db.apply(application())
    if shelter:
        for name in SLICED:
            db.alter_queue(name, retention=SHELTER)


def prepare_by_hand(db: sluice.Database) -> None:
    """The definitions without rules, and the join's state queue with its indexed property."""
    db.apply(definitions() + "\nCREATE QUEUE joinState;\n")
    db.create_property("joinRequest", "body.request", queues=["joinState"])


def _drain(
    db: sluice.Database,
    queue: str,
    k: int,
    step: Callable[[sluice.Transaction, sluice.Message], None],
) -> int:
    """Take ``queue``'s messages k per transaction, ``step`` each, until it is empty."""
    done = 0
    while True:
        with db.transaction() as tx:
            msgs = tx.dequeue(queue, limit=k)
            for m in msgs:
                step(tx, m)
        if not msgs:
            return done
        done += len(msgs)


def _xml(element: Any) -> str:
    text: bytes = etree.tostring(element)
    return text.decode("utf-8")


def _fork(tx: sluice.Transaction, m: sluice.Message) -> None:
    request = m.properties["requestID"]
    customer = m.properties.get("customerID")
    if not customer:
        refusal = etree.Element("refusal", request=request)
        refusal.text = "no customer given"
        tx.enqueue("customer", _xml(refusal), content_type=XML)
        return
    root = etree.fromstring(str(m.body).encode("utf-8"))
    items = root.findall("item")
    legal = etree.Element("legalCheck", request=request)
    availability = etree.Element("availability", request=request)
    for item in items:
        legal.append(etree.fromstring(etree.tostring(item)))
        availability.append(etree.fromstring(etree.tostring(item)))
    quantity = int(sum(float(item.get("qty", "0")) for item in items))
    credit = etree.Element("creditCheck", request=request, customer=customer)
    tx.enqueue("finance", _xml(credit), content_type=XML)
    tx.enqueue("legal", _xml(legal), content_type=XML)
    tx.enqueue("supplier", _xml(availability), content_type=XML,
               properties={"quantity": quantity})  # fmt: skip
    tx.enqueue("joinState", {"request": request, "kind": "request", "customer": customer})


def _finance(tx: sluice.Transaction, m: sluice.Message) -> None:
    root = etree.fromstring(str(m.body).encode("utf-8"))
    customer = m.properties["customerID"]
    overdue = tx.browse("overdue", where=f"props.customerID = '{customer}'", limit=1)
    verdict = "financeRefused" if overdue else "financeOK"
    answer = etree.Element(verdict, request=str(root.get("request")))
    tx.enqueue("checks", _xml(answer), content_type=XML)


def _legal(tx: sluice.Transaction, m: sluice.Message) -> None:
    root = etree.fromstring(str(m.body).encode("utf-8"))
    controlled = root.xpath('boolean(/legalCheck/item[@export = "controlled"])')
    verdict = "legalRefused" if controlled else "legalOK"
    answer = etree.Element(verdict, request=str(root.get("request")))
    tx.enqueue("checks", _xml(answer), content_type=XML)


def _join(tx: sluice.Transaction, m: sluice.Message) -> None:
    request = m.properties["requestID"]
    answer = {"request": request, "kind": "answer", "verdict": m.properties["verdict"],
              "price": m.properties.get("price")}  # fmt: skip
    where = f"joinRequest = '{request}'"
    state = [s.body for s in tx.browse("joinState", where=where, limit=10)]
    answers = [s for s in state if isinstance(s, dict) and s["kind"] == "answer"] + [answer]
    if len(answers) < 3:
        tx.enqueue("joinState", answer)
        return
    tx.dequeue("joinState", where=where, limit=10)  # the request is answered: forget it
    customer = next(s["customer"] for s in state if isinstance(s, dict) and s["kind"] == "request")
    refused = [str(a["verdict"]) for a in answers if str(a["verdict"]).endswith("Refused")]
    if refused:
        reply = etree.Element("refusal", request=request)
        reply.text = refused[0]
    else:
        price = max(float(a["price"]) for a in answers if a["price"] is not None)
        reply = etree.Element("offer", request=request, customer=customer, price=f"{price:g}")
    tx.enqueue("customer", _xml(reply), content_type=XML)


def as_shipped(db: sluice.Database, n: int, batch: int) -> tuple[int, int]:
    """(answers, offers) to the customer when an upkeep runs between the engine's phases.

    ``db`` holds procurement.rules as it ships (``prepare_by_rules(shelter=False)``) and N
    loaded requests. ``db.recover()`` runs the upkeep the session's lease keeper runs on
    its own every few seconds: what a longer run meets at some point anyway.
    """
    db.rules.run_until_idle(batch=batch)
    db.recover()
    supplier(db, batch)
    db.rules.run_until_idle(batch=batch)
    return _answers(db, n)


def _answers(db: sluice.Database, n: int) -> tuple[int, int]:
    got = [str(m.body) for m in db.queue("customer").browse(limit=n + 1)]
    return len(got), sum(1 for text in got if text.startswith("<offer"))


def check_answered(db: sluice.Database, n: int) -> None:
    """After a run: one answer per request to the customer, the right number of offers."""
    answers, offers = _answers(db, n)
    if answers != n or offers != expected_offers(n):
        raise RuntimeError(
            f"customer got {answers} answers for {n} requests, {offers} offers"
            f" (expected {expected_offers(n)})"
        )
