"""How the rules engine evaluates a queue's batch: at once, in waves, or a message at a
time (rules/plan.py), and how a batch splits into waves."""

from __future__ import annotations

from pathlib import Path

import sluice
from sluice.backends.sqlite import SQLiteBackend
from sluice.demo.procurement import application
from sluice.rules.plan import QueuePlan, compile_application, split_waves


def plans(tmp_path: Path, text: str) -> dict[str, QueuePlan]:
    path = tmp_path / "plan.db"
    with sluice.connect(f"sqlite:///{path}") as db:
        db.apply(text)
        app = db.rules.application
    backend = SQLiteBackend(str(path))
    try:
        ids = {str(n): int(i) for n, i in backend.rules_read("rules_queue_ids", {})}
        return {p.name: p for p in compile_application(app, backend, ids)}
    finally:
        backend.close()


def how(plan: QueuePlan) -> str | tuple[str, ...]:
    if not plan.sequential:
        return "at once"
    if plan.waves is None:
        return "one at a time"
    return tuple(j.slicing for j in plan.waves)


def test_the_procurement_queues_go_at_once_or_in_waves_of_their_slices(tmp_path: Path) -> None:
    found = {name: how(plan) for name, plan in plans(tmp_path, application()).items()}
    assert found == {
        "offerRequests": ("requestMsgs",),  # forkRequest resets its request's slice
        "checks": ("requestMsgs",),  # the join reads the slice
        "finance": "at once",  # reads overdue, which no rule of finance writes
        "legal": "at once",
        "purchaseOrders": "at once",
        "invoices": ("invoiceRetention",),
        "payments": ("invoiceRetention",),
        "paymentChecks": ("invoiceRetention",),
        "paymentDue": "at once",
        "crmErrors": "at once",
    }


def test_reading_a_queue_the_rules_write_or_a_reset_by_key_goes_one_at_a_time(
    tmp_path: Path,
) -> None:
    found = plans(
        tmp_path,
        """
        CREATE QUEUE a; CREATE QUEUE b; CREATE QUEUE c;
        CREATE PROPERTY k AS text QUEUE a, b, c VALUE body.k;
        CREATE SLICING byK ON k;
        CREATE RULE counts FOR a
          IF (SELECT count(*) FROM queue('b') AS x) < 3 THEN ENQUEUE body INTO b;
        CREATE RULE resets FOR b IF true THEN RESET byK KEY 'x';
        CREATE RULE reads FOR c
          IF EXISTS (SELECT 1 FROM queue('b') AS x) THEN ENQUEUE body INTO a;
        """,
    )
    assert how(found["a"]) == "one at a time"
    assert how(found["b"]) == "one at a time"
    assert how(found["c"]) == "at once"


def test_a_batch_splits_into_waves_with_one_message_per_slice_each() -> None:
    keys = {1: ("a", None), 2: ("a", "x"), 3: ("b", "x"), 4: (None, None), 5: ("b", "y")}
    # 2 follows 1 (slice a); 3 follows 2 (slice x); 5 follows 3 (slice b).
    assert split_waves([1, 2, 3, 4, 5], keys) == [[1, 4], [2], [3], [5]]
    assert split_waves([1, 2], {}) == [[1, 2]]


def test_a_queue_keeps_processed_messages_only_where_something_could_see_them(
    tmp_path: Path,
) -> None:
    found = plans(
        tmp_path,
        """
        CREATE QUEUE plain; CREATE QUEUE kept RETENTION 1 hour; CREATE QUEUE read;
        CREATE QUEUE sliced; CREATE QUEUE out; CREATE QUEUE sink;
        CREATE PROPERTY k AS text QUEUE sliced VALUE body.k;
        CREATE SLICING byK ON k;
        CREATE RULE p FOR plain IF true THEN ENQUEUE body INTO out;
        CREATE RULE q FOR kept IF true THEN ENQUEUE body INTO out;
        CREATE RULE r FOR read IF true THEN ENQUEUE body INTO out;
        CREATE RULE s FOR sliced IF true THEN ENQUEUE body INTO out;
        CREATE RULE t FOR out IF EXISTS (SELECT 1 FROM queue('read')) THEN ENQUEUE body INTO sink;
        """,
    )
    assert {name: plan.removes for name, plan in found.items()} == {
        "plain": True,  # nothing could see it kept: removed as it is processed
        "kept": False,  # its retention keeps it
        "read": False,  # a rule reads the queue
        "sliced": False,  # a slice holds it
        "out": True,  # its rule reads another queue, not this one
    }
