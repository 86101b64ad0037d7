"""Demaq's procurement process end to end, on every backend (docs/rules.md)."""

from __future__ import annotations

import sluice
from sluice.demo.procurement import run_procurement_demo


def test_the_procurement_process_runs_as_the_paper_describes(db: sluice.Database) -> None:
    report = run_procurement_demo(db)
    assert report.checks, "the demo checked nothing"
    assert report.ok, report.checks
    # What the customers received, in order.
    assert report.customer == [
        '<refusal request="r3">no customer given</refusal>',  # refused at once
        '<offer customer="c1" price="100" request="r1"></offer>',
        '<refusal request="r2">legalRefused</refusal>',
        '<offer customer="c3" price="100" request="r4"></offer>',
        '<reminder invoice="inv-r4"></reminder>',
        '<refusal request="r6">financeRefused</refusal>',
    ]
    assert report.errors == 1
    (alert,) = report.alerts
    assert alert == {"alert": "a rule failed", "rule": "forkRequest", "kind": "message",
                     "request": alert["request"]}  # fmt: skip
    # The failed request, named by the id its producer was given (Message.id).
    (r5,) = db.queue("offerRequests").browse(state="done")
    assert alert["request"] == r5.id
    # Every queue's contents at the end: what slices still hold, what retention keeps.
    assert {q: n for q, n in report.queues.items() if n} == {
        "offerRequests": 1,  # r5: its fork failed, its slice never completes
        "invoices": 1,  # inv-r4, unpaid: its slice is never reset
        "paymentChecks": 1,  # inv-r4's payment check, in the same slice
        "overdue": 1,  # c3, read by the credit check
    }
    assert [m.body for m in db.queue("overdue").browse()] == [
        '<overdue invoice="inv-r4"></overdue>'
    ]
    assert db.queue("overdue").browse()[0].properties["customerID"] == "c3"
    # Retention removed every other processed message (overdue has no rules: unprocessed).
    assert report.removed == report.processed - 3
