"""Arrival order across the queues a rule set reads together (rules/arrival.py): the
outcome is the one processing every message one at a time, oldest first, would give,
whatever queue each waits in. On every backend."""

from __future__ import annotations

from typing import Any

import pytest

import sluice
from sluice.rules.arrival import arrival_groups
from sluice.rules.plan import compile_application

# Registrations and transfers of accounts: a transfer empties the account's slice, and
# a registration reports how many messages its slice holds. Which queue a message
# came from, the slicing rule reads as `queue`.
ACCOUNTS = """
CREATE QUEUE registrations;
CREATE QUEUE transfers;
CREATE QUEUE counts;
CREATE PROPERTY account AS text QUEUE registrations, transfers VALUE body.account;
CREATE SLICING byAccount ON account;
CREATE RULE tally FOR byAccount
  IF queue = 'registrations' THEN
    ENQUEUE json_object('who', body.who, 'held', (SELECT count(*) FROM slice() AS s))
      INTO counts
  ELSE RESET;
"""


def bodies(db: sluice.Database, queue: str) -> list[Any]:
    return [m.body for m in db.queue(queue).browse(limit=1000)]


def test_messages_waiting_in_several_queues_of_a_slicing_are_processed_in_arrival_order(
    db: sluice.Database,
) -> None:
    db.apply(ACCOUNTS)
    # All three wait before the engine runs: taken a queue at a time, both registrations
    # would see each other and the transfer's reset would come last.
    db.queue("registrations").put({"account": "A", "who": "first"})
    db.queue("transfers").put({"account": "A"})
    db.queue("registrations").put({"account": "A", "who": "second"})
    stats = db.rules.run_until_idle()
    assert stats.processed == 3
    assert stats.errors == 0
    assert bodies(db, "counts") == [{"who": "first", "held": 1}, {"who": "second", "held": 1}]


def test_arrival_order_holds_across_batches_and_interleavings(db: sluice.Database) -> None:
    db.apply(ACCOUNTS)
    expected = []
    held: dict[str, int] = {}
    for n in range(60):
        account = "AB"[n % 2]
        if n % 7 == 3:
            db.queue("transfers").put({"account": account})
            held[account] = 0  # the reset leaves the slice empty, the transfer out too
        else:
            db.queue("registrations").put({"account": account, "who": n})
            held[account] = held.get(account, 0) + 1
            expected.append({"who": n, "held": held[account]})
    # Small batches: the group's runs split across many transactions.
    stats = db.rules.run_until_idle(batch=4)
    assert stats.processed == 60
    assert stats.errors == 0
    assert bodies(db, "counts") == expected


def test_queues_sharing_no_state_the_rules_read_are_taken_alone(db: sluice.Database) -> None:
    db.apply(
        ACCOUNTS
        + """
CREATE QUEUE orders; CREATE QUEUE billing;
CREATE RULE bill FOR orders IF true THEN ENQUEUE body INTO billing;
CREATE QUEUE audit; CREATE QUEUE readers;
CREATE RULE look FOR readers
  IF (SELECT count(*) FROM queue('audit') AS a) > 0 THEN ENQUEUE body INTO billing;
CREATE RULE note FOR orders IF body.audit THEN ENQUEUE body INTO audit;
"""
    )
    app = db.rules.application
    ids = {str(n): int(i) for n, i in db.backend.rules_read("rules_queue_ids", {})}
    plans = compile_application(app, db.backend, ids)
    groups = sorted(sorted(p.name for p in g) for g in arrival_groups(plans))
    # registrations and transfers share a slicing a rule reads; orders writes into audit,
    # which readers reads; billing's writers read nothing of each other.
    assert groups == [["orders", "readers"], ["registrations", "transfers"]]


def test_queues_of_different_priorities_are_not_merged(db: sluice.Database) -> None:
    db.apply(ACCOUNTS.replace("CREATE QUEUE transfers;", "CREATE QUEUE transfers PRIORITY 5;"))
    db.queue("registrations").put({"account": "A", "who": "first"})
    db.queue("transfers").put({"account": "A"})
    db.queue("registrations").put({"account": "A", "who": "second"})
    db.rules.run_until_idle()
    # The transfer's queue goes first (Demaq: arrival order within queue priorities).
    assert bodies(db, "counts") == [{"who": "first", "held": 1}, {"who": "second", "held": 2}]


@pytest.mark.parametrize("workers", [2])
def test_workers_keep_arrival_order_in_a_group(db: sluice.Database, workers: int) -> None:
    db.apply(ACCOUNTS)
    for n in range(40):
        if n % 5 == 2:
            db.queue("transfers").put({"account": "A"})
        else:
            db.queue("registrations").put({"account": "A", "who": n})
    db.rules.run_until_idle(batch=3, workers=workers)
    held = [b["held"] for b in bodies(db, "counts")]
    # The slice holds what came since the last transfer: 1, 2, then 1, 2, 3, 4 ...
    assert held == [1, 2] + [1, 2, 3, 4] * 7 + [1, 2]


def test_an_error_message_names_its_trigger_by_the_id_its_producer_was_given(
    db: sluice.Database,
) -> None:
    db.apply(
        "CREATE QUEUE inbox; CREATE QUEUE out;\n"
        "CREATE RULE copy FOR inbox IF true THEN ENQUEUE body.missing INTO out;"
    )
    given = db.queue("inbox").put({"n": 1})
    db.rules.run_until_idle()
    (error,) = bodies(db, "sluice_rule_errors")
    assert error["trigger"]["id"] == given  # Message.id: session/transaction/number
    # seq: the trigger's row number, the trigger_id of the messages its rules make.
    assert isinstance(error["trigger"]["seq"], int)
