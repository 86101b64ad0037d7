"""Taking a message stays an index lookup under PostgreSQL's generic plans.

sluice's connections plan every statement generically (``plan_cache_mode =
force_generic_plan``, with ``enable_seqscan = off``: backends/postgres_pooler.py). A claim
written as ``UPDATE ... FROM (SELECT ... LIMIT n) AS pick WHERE m.id = pick.id`` got a hash
join there, fed by a full scan of the message table's primary key: a claim read every
message to take one, and a consumer slowed with its backlog (47 messages/s at 100,000
against 956 at 1,000: bench/results/backlog-2026-12-05-before-after.md). Each claim statement
is planned here as sluice's connections plan it, on a backlog the planner has statistics
of, and run; the rows its scans of the message table read are counted. So are the
statements that settle what a transaction took, by an array of ids.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import sluice
from sluice.backends.postgres_pooler import SETTINGS
from sluice.backends.postgres_queries import load_queries
from tests.conftest import drop_schema, fresh_postgres_url, postgres_base_url, schema_of
from tests.postgres_server import PostgresServer

BACKLOG = 10_000
GROUPED = 10

# The _with_own variants are left out: a transaction that takes from a queue it has
# enqueued into and not committed picks by `state IN (1, 5) OR (state = 0 AND ...)`, which
# the delivery index does not order, so their pick scans the queue whatever the plan.
CLAIMS = ["claim", "claim_in_caller_tx", "claim_lanes", "claim_lanes_in_caller_tx"]


@pytest.fixture(scope="module")
def filled(postgres_server: PostgresServer | str) -> Iterator[tuple[str, str]]:
    """A schema whose one queue 'q' holds BACKLOG ready messages and a few of a group (a
    lane's key), analyzed as sluice's maintainer does once a partition passes 1,000 rows;
    (base URL, schema). (The plan that read the table came from such statistics: one
    queue, all ready. Spread over more queues, the same statement's estimates could keep
    the nested loop, which is why the array form does not leave it to them.)"""
    url = fresh_postgres_url(postgres_server)
    with sluice.connect(url) as db:
        db.create_queue("q")
        db.queue("q").put_many([{"n": n} for n in range(BACKLOG)])
        db.queue("q").put_many([{"n": n} for n in range(GROUPED)], group="g")
    base = postgres_base_url(postgres_server)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}.messages").format(sql.Identifier(schema_of(url))))
    yield base, schema_of(url)
    drop_schema(url)


def _prepared(text: str) -> tuple[str, list[str]]:
    """psycopg's %(name)s placeholders as PREPARE's $1, $2...; and the names, in order."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m[1] not in names:
            names.append(m[1])
        return f"${names.index(m[1]) + 1}"

    return re.sub(r"%\((\w+)\)s", number, text).replace("%%", "%"), names


# What settles a transaction's messages: by their ids, given as an array.
SETTLES = ["delete_claimed", "delete_claimed_pairs", "keep_claimed"]


def _values(lane_key: str, some_id: int) -> dict[str, Any]:
    return {
        "session": 1,
        "tx": 1,
        "queue": "q",
        "now": time.time() + 1,
        "limit": 1,
        "fill": True,
        "lanes": [lane_key],
        "run": 10,
        # A settle of one message this transaction does not hold: it settles none.
        "ids": [some_id],
        "txs": [1],
        "expected": 0,
        "settled_at": time.time(),
    }


_SCANS = ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan")


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows that the plan's scans of a message partition read, kept or filtered out."""
    read = 0
    if plan["Node Type"] in _SCANS and plan["Relation Name"].startswith("messages"):
        kept = (
            plan["Actual Rows"]
            + plan.get("Rows Removed by Filter", 0)
            + plan.get("Rows Removed by Index Recheck", 0)
        )
        read += kept * plan["Actual Loops"]
    return read + sum(_rows_read(child) for child in plan.get("Plans", ()))


def _generic_plan(
    base: str, schema: str, name: str, values: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The plan of statement ``name`` as a prepared statement's generic plan, run (and
    rolled back) with ``values`` (else a claim's and a settle's, on the backlog's lane):
    its JSON, as EXPLAIN (ANALYZE, FORMAT JSON) gives it."""
    ready, templates = load_queries(schema)
    if name in templates:
        template = templates[name]
        # A plain claim: no selection, no ordering, the fragments the backend fills in.
        text, names = _prepared(template.fill(**dict.fromkeys(template.holes, "")))
    else:
        text, names = _prepared(ready[name])
    with psycopg.connect(base) as conn:
        if values is None:
            found = conn.execute(
                sql.SQL("SELECT lane, id FROM {}.messages WHERE lane IS NOT NULL LIMIT 1").format(
                    sql.Identifier(schema)
                )
            ).fetchone()
            assert found is not None
            values = _values(*found)
        for setting, value in SETTINGS:  # as sluice's own connections run (generic plans)
            conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(setting), sql.Literal(value)))
        conn.execute(sql.SQL("PREPARE check_claim AS ") + sql.SQL(text))
        explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE check_claim ({})").format(
            sql.SQL(", ").join(sql.Literal(values[n]) for n in names)
        )
        row = conn.execute(explain).fetchone()
        conn.rollback()  # nothing claimed stays claimed
    assert row is not None
    (plan,) = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return dict(plan)


@pytest.mark.parametrize("name", CLAIMS)
def test_a_claim_reads_no_table_scan(filled: tuple[str, str], name: str) -> None:
    plan = _generic_plan(*filled, name)
    read = _rows_read(plan["Plan"])
    assert plan["Plan"]["Actual Rows"] == 1, "the claim took no message: the check proves nothing"
    # A hash join over the table would read every message (BACKLOG rows) for one.
    assert read < BACKLOG // 10, f"{name}: its scans read {read:,} message rows"


@pytest.mark.parametrize("name", SETTLES)
def test_a_settle_reads_no_table_scan(filled: tuple[str, str], name: str) -> None:
    read = _rows_read(_generic_plan(*filled, name)["Plan"])
    assert read < BACKLOG // 10, f"{name}: its scans read {read:,} message rows"


@pytest.fixture(scope="module")
def topic(postgres_server: PostgresServer | str) -> Iterator[tuple[str, str]]:
    """A schema whose topic 't' keeps BACKLOG messages at two priorities, with a
    subscription 's' made before them, analyzed; (base URL, schema)."""
    url = fresh_postgres_url(postgres_server)
    with sluice.connect(url) as db:
        db.create_topic("t")
        db.subscribe("t", "s")
        db.queue("t").put_many([{"n": n} for n in range(BACKLOG // 2)], priority=3)
        db.queue("t").put_many([{"n": n} for n in range(BACKLOG // 2)])
    base = postgres_base_url(postgres_server)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}.messages").format(sql.Identifier(schema_of(url))))
    yield base, schema_of(url)
    drop_schema(url)


def _point(base: str, schema: str, past: bool) -> None:
    """Subscription 's''s pointer where a case wants it: before all of its topic (news
    past it), or at its last message (none); kept."""
    with psycopg.connect(base) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {0}.queues SET pointer = CASE WHEN %s THEN 0"
                " ELSE (SELECT max(id) FROM {0}.messages) END WHERE name = 's'"
            ).format(sql.Identifier(schema)),
            (past,),
        )


@pytest.mark.parametrize("past", [True, False], ids=["news past the pointer", "none"])
def test_a_subscriptions_look_past_its_pointer_reads_no_topic_scan(
    topic: tuple[str, str], past: bool
) -> None:
    """subscription_state runs before the takes of a consumer that keeps up: joined with
    the subscription's row, the topic's rows were read whole (2.7-3.0 ms a take with
    20,000 kept, under 0.2 ms with the seeks)."""
    base, schema = topic
    _point(base, schema, past)
    plan = _generic_plan(base, schema, "subscription_state", {"name": "s"})
    assert plan["Plan"]["Actual Rows"] == 1
    read = _rows_read(plan["Plan"])
    assert read < 100, f"subscription_state: its scans read {read:,} message rows"


@pytest.mark.parametrize("past", [True, False], ids=["news past the pointer", "none"])
def test_a_guarded_claim_reads_no_topic_scan(topic: tuple[str, str], past: bool) -> None:
    """claim_subscribed asks subscription_state's question inside the claim, before every
    take of a consumer that does not keep up: the same seeks, not the topic's rows."""
    base, schema = topic
    _point(base, schema, past)
    values = {"queue": "s", "session": 1, "tx": 1, "now": time.time() + 1, "limit": 1}
    plan = _generic_plan(base, schema, "claim_subscribed", values | {"touch_every": 30.0})
    assert plan["Plan"]["Actual Rows"] == 1  # the row of NULLs: ahead, or nothing held
    read = _rows_read(plan["Plan"])
    assert read < 100, f"claim_subscribed: its scans read {read:,} message rows"


def test_the_count_sees_a_table_scan(filled: tuple[str, str]) -> None:
    """What the check counts: a statement that scans the table reads the backlog (it can fail)."""
    base, schema = filled
    with psycopg.connect(base) as conn:
        row = conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(body) FROM {}.messages").format(
                sql.Identifier(schema)
            )
        ).fetchone()
    assert row is not None
    (plan,) = row[0]
    assert _rows_read(plan["Plan"]) == BACKLOG + GROUPED
