"""A subscription's look past its pointer seeks; it does not read what its topic keeps.

subscription_state runs before a take whenever a subscription may need a pull, which is
before every take of a consumer that keeps up. Written as a join of the topic's rows
with the subscription's, SQLite sorted the topic's rows to find each priority and read
them all again to look past the pointer: 116-246 microseconds a take with 3,000 kept,
growing with the topic (10 with the seeks). tests/postgresql/test_plans.py counts the
rows PostgreSQL's plan reads.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sluice
from sluice.backends.sqlite_statements import load_queries


def test_the_look_past_the_pointer_seeks_the_delivery_index(tmp_path: Path) -> None:
    path = tmp_path / "topic.db"
    with sluice.connect(f"sqlite:///{path}") as db:
        db.create_topic("t")
        db.subscribe("t", "s")
        db.queue("t").put_many([{"n": n} for n in range(2_000)], priority=3)
        db.queue("t").put_many([{"n": n} for n in range(2_000)])
    statement = load_queries()[0]["subscription_state"]
    with sqlite3.connect(path) as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {statement}", {"name": "s"})]
        (found,) = conn.execute(statement, {"name": "s"}).fetchall()
    assert found[4] == 1, "the topic has messages past the pointer: the look must see them"
    assert not [step for step in plan if "TEMP B-TREE" in step], plan
    reads = [step for step in plan if step.startswith(("SEARCH m ", "SCAN m "))]
    assert reads, plan
    # Each read of the topic's rows is a seek to one state (and priority), never a scan of
    # the topic's whole range of the index.
    assert all("state=?" in step for step in reads), reads
