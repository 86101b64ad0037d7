"""The PostgreSQL backend's statements: which named statements a unit of work runs.

Functions from a unit's inputs (a commit plan, envelopes, lanes) to a list of
``(statement name, parameters)``, so the pooled backend and the outbox (a
caller's connection) run exactly the same statements; plus the translation of
driver errors, once, by SQLSTATE.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import psycopg

from sluice.backends.postgres_schema import CREDIT_LOCK_CLASS, LOCK_CLASS
from sluice.backends.records import (
    SLOTS,
    CommitPlan,
    ConnectionLost,
    Duplicate,
    Envelope,
    Lane,
    MessageRow,
    Row,
    Selection,
    lease_lost,
    message_row,
    plain_ack,
)
from sluice.clock import Clock
from sluice.errors import Conflict, InvalidBody, MessageError, SluiceError, StorageError
from sluice.message import JSON, encode_json, is_json

__all__ = [
    "EXPECT_FAILED",
    "Expected",
    "Route",
    "abort_statements",
    "acks_statement",
    "claim_answer",
    "claim_rounds",
    "claim_steps",
    "commit_failure",
    "commit_statements",
    "credit_limit",
    "credit_statements",
    "enqueue_statement",
    "fetched",
    "first",
    "fronts",
    "lane_front_statements",
    "lanes_params",
    "lease_lost",
    "message_rows",
    "offset_between",
    "release_statements",
    "server_offset",
    "translate",
]

EXPECT_FAILED = "SL001"
"""The SQLSTATE of sluice's own ``expect()`` function (schema.sql) when a check fails."""
UNIQUE_VIOLATION = "23505"
OUT_OF_RANGE = "22003"  # numeric_value_out_of_range: double precision overflows


def enqueue_statement(
    session: int, tx: int, envelopes: Sequence[Envelope], ready: bool, durable: bool
) -> tuple[str, Any]:
    """The enqueue statement: envelopes travel as one JSON array, unpacked by the server.

    (One text parameter, encoded in C, costs less than an array per field.)
    """
    params = {
        "session": session,
        "tx": tx,
        "ready": ready,
        "queues": sorted({e.queue for e in envelopes}),
        "rows": encode_json([_row(e) for e in envelopes]),
        "durable": durable,
    }
    return "enqueue", params


def _row(e: Envelope) -> dict[str, Any]:
    """An envelope as the enqueue function reads it (json_to_recordset): a field left out
    is NULL, so only what a message has travels (a third of the encoding, and of the
    server's parsing, for a plain one). A JSON body's content type is stored as NULL."""
    row: dict[str, Any] = {
        "queue": e.queue,
        "num": e.num,
        "priority": e.priority,
        "enqueued_at": e.enqueued_at,
        "available_at": e.available_at,
    }
    if isinstance(e.body, bytes):
        row["body_b64"] = base64.b64encode(e.body).decode()
    else:
        row["body"] = _text(e.body, e.content_type)
    if e.content_type != JSON:
        row["content_type"] = e.content_type
    if e.properties is not None:
        row["properties"] = _properties(e.properties)
    for name in ("correlation_id", "reply_to", "expires_at", "type"):
        value = getattr(e, name)
        if value is not None:
            row[name] = value
    if e.lane is not None:
        row["grp"] = e.group
        row["lane"] = e.lane
    if e.keys is not None:
        row.update(slot_values(e))
    return row


def slot_values(e: Envelope) -> dict[str, Any]:
    """Declared properties' values; left out when there are none (the common case)."""
    return dict(zip(SLOTS, e.keys, strict=True)) if e.keys is not None else {}


def fronts(lanes: Sequence[str], results: Sequence[list[Row]]) -> dict[str, tuple[int, int]]:
    """lane_front's answers by lane (a lane with nothing waiting has none)."""
    return {
        lane: (writer, writer_tx)
        for lane, rows in zip(lanes, results, strict=True)
        for writer, writer_tx in rows[:1]
    }


def lanes_params(lanes: Sequence[Lane] | Sequence[Row]) -> dict[str, Any]:
    return {"lane_queues": [q for q, _ in lanes], "lane_keys": [lane for _, lane in lanes]}


def release_statements(
    session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane]
) -> list[tuple[str, Any]]:
    """Give back held messages (out of attempts: to the error queue); their lanes get heads."""
    params = {"session": session, "tx": tx, "ids": list(refs)}
    statements: list[tuple[str, Any]] = [("dead_letter", params), ("release", params)]
    if lanes:
        statements.append(("promote", lanes_params(lanes)))
    return statements


def lane_front_statements(queue: str, lanes: Sequence[str]) -> list[tuple[str, Any]]:
    return [("lane_front", {"queue": queue, "lane": lane}) for lane in lanes]


def abort_statements(
    key: dict[str, Any], held: bool, lanes: Sequence[Lane]
) -> list[tuple[str, Any]]:
    """An abort's statements: pending rows go, held ones go back, their lanes get heads."""
    statements: list[tuple[str, Any]] = [("delete_pending", key)]
    if held:
        statements += [("delete_own_claimed", key), ("dead_letter", key), ("release", key)]
        if lanes:
            statements.append(("promote", lanes_params(lanes)))
    return statements


def acks_statement(plans: Sequence[CommitPlan]) -> list[tuple[str, Any]]:
    """Plain acknowledgements (``plain_ack``) of one session's transactions as the one
    statement that settles them all; [] if ``plans`` are not only that."""
    sessions = {plan.session for plan in plans}
    if len(sessions) != 1 or not all(plain_ack(plan) for plan in plans):
        return []
    ids = [ref for plan in plans for ref in plan.held]
    txs = [plan.tx for plan in plans for _ in plan.held]
    params = {"session": sessions.pop(), "ids": ids, "txs": txs, "expected": len(ids)}
    return [("delete_claimed_pairs", params)]


def fetched(cur: psycopg.Cursor[Any]) -> list[Any]:
    """A cursor's rows; [] for a statement that returns none. (``cur.description`` would
    say so too, but builds a Column for each of the result's columns every time: a sixth
    of a claim's Python time.)"""
    result = cur.pgresult
    return cur.fetchall() if result is not None and result.nfields else []


def claim_rounds(
    run: Callable[[str, dict[str, Any]], list[MessageRow]],
    selected: Callable[[str, Selection | None], tuple[str, dict[str, Any]]],
    *,
    clock: Clock,
    session: int,
    tx: int,
    queue: str,
    limit: int,
    own: bool,
    select: Selection | None,
    lanes: Sequence[str],
    fill: bool,
    suffix: str,
    chain: bool = True,
) -> list[MessageRow]:
    """``claim_steps``, each statement run by ``run``."""
    steps = claim_steps(selected, clock=clock, session=session, tx=tx, queue=queue, limit=limit,
                        own=own, select=select, lanes=lanes, fill=fill, suffix=suffix,
                        chain=chain)  # fmt: skip
    try:
        statement = next(steps)
        while True:
            statement = steps.send(run(*statement))
    except StopIteration as stop:
        rows: list[MessageRow] = stop.value
        return rows


def claim_steps(
    selected: Callable[[str, Selection | None], tuple[str, dict[str, Any]]],
    *,
    clock: Clock,
    session: int,
    tx: int,
    queue: str,
    limit: int,
    own: bool,
    select: Selection | None,
    lanes: Sequence[str],
    fill: bool,
    suffix: str,
    chain: bool = True,
) -> Generator[tuple[str, dict[str, Any]], list[MessageRow], list[MessageRow]]:
    """Claim in rounds: of a lane only the head is claimable, or the next message for the
    lane's holder, so lanes taken in one round offer their next message to the next.

    Yields each statement to run and is sent its rows (a blocking caller and an
    awaiting one, sluice.aio, run the same rounds). Without lanes involved this is
    one statement, as always.
    """
    base = "claim_with_own" if own else "claim"
    owned = set(lanes)
    rows: list[MessageRow] = []
    while len(rows) < limit:
        name, extra = selected(f"{base}_lanes{suffix}" if owned else f"{base}{suffix}", select)
        params = {"session": session, "tx": tx, "queue": queue, "limit": limit - len(rows),
                  "now": clock.now()} | extra  # fmt: skip
        if owned:
            # A lane's run is taken whole; with a selection only its next message,
            # which is the one the selection may judge without skipping any.
            params["lanes"] = sorted(owned)
            params["run"] = 1 if select is not None else limit - len(rows)
            params["fill"] = fill or not lanes  # lanes found in this call: fill as asked
        taken = yield name, params
        if not taken:
            break
        rows += taken
        more = {
            r.lane for r in taken if r.lane is not None and (r.p_session, r.p_tx) != (session, tx)
        }
        if not more or not chain:
            break  # no lane took part: this round took all there was
        owned |= more
    if select is not None and select.order and len(rows) > 1:
        # A claim returns its rows in delivery order (its UPDATE ... RETURNING keeps
        # none); an ordering dequeue's caller gets them in order_by's, re-read in one go.
        name, extra = selected("claimed_in_order", select)
        rows = yield name, {"ids": [r.id for r in rows], "queue": queue} | extra
    return rows


def credit_statements(queue: str) -> list[tuple[str, Any]]:
    """What a claim on a capped queue runs first, in its own transaction: the queue's
    credit lock, then its count (separate statements, so the count sees every claim
    committed before the lock was had)."""
    return [
        ("credit_lock", {"lock_class": CREDIT_LOCK_CLASS, "queue": queue}),
        ("queue_credit", {"queue": queue}),
    ]


def credit_limit(limit: int, rows: list[Row]) -> int:
    """How many of ``limit`` a claim may take, by queue_credit's answer."""
    credit = first(rows)
    return limit if credit is None else max(0, min(limit, int(credit)))


def commit_statements(plan: CommitPlan, *, in_caller_tx: bool = False) -> list[tuple[str, Any]]:
    key = {"session": plan.session, "tx": plan.tx}
    statements: list[tuple[str, Any]] = []
    if plan.effects:
        plain = commit_statements(replace(plan, effects=()), in_caller_tx=in_caller_tx)
        # The effects' own expect() checks their row counts (jobs.sql).
        return plain + [(e.name, e.params) for e in plan.effects]
    if (
        plan.lanes
        and plan.held
        and not (plan.rejects or plan.pending or plan.enqueues or plan.kept)
    ):
        # The common commit of a lane's reader: one statement settles and promotes.
        settle = key | {"ids": list(plan.held)} | lanes_params(plan.lanes)
        return [("settle", settle)]
    if plan.lanes and (plan.pending or plan.enqueues):
        # Queue locks before lane locks, in every transaction that takes both (the
        # enqueue takes its queues' locks, promote its lanes'): no deadlocks.
        queues = sorted({e.queue for e in plan.enqueues})
        statements.append(("commit_lock", key | {"lock_class": LOCK_CLASS, "queues": queues}))
    if plan.held:
        for ref, reason in plan.rejects.items():
            statements.append(("reject", key | {"id": ref, "reason": reason}))
        remaining = [ref for ref in plan.held if ref not in plan.rejects]
        if plan.kept:  # a queue with retention: done, not deleted
            kept = {"ids": list(plan.kept), "expected": len(plan.kept)}
            statements.append(("keep_claimed", key | kept | {"settled_at": plan.settled_at}))
            done = set(plan.kept)
            remaining = [ref for ref in remaining if ref not in done]
        if remaining:
            params = key | {"ids": remaining, "expected": len(remaining)}
            statements.append(("delete_claimed", params))
    if plan.pending:
        # The lock covers the pending rows' queues and the new ones (enqueue
        # takes it again: advisory locks nest within a transaction).
        queues = sorted({e.queue for e in plan.enqueues})
        lock = key | {"lock_class": LOCK_CLASS, "queues": queues}
        statements += [("commit_lock", lock), ("publish_pending", key | {"pending": plan.pending})]
    if plan.enqueues:
        # Inside a larger unit the unit decides durability; alone, enqueue does.
        durable = plan.durable or len(statements) > 0 or in_caller_tx or bool(plan.lanes)
        statements.append(enqueue_statement(plan.session, plan.tx, plan.enqueues, True, durable))
    if plan.lanes:
        statements.append(("promote", lanes_params(plan.lanes)))
    return statements


def commit_failure(plan: CommitPlan, exc: Expected) -> SluiceError:
    """What a commit whose ``expect()`` failed raises: a jobs effect's, or a lost lease."""
    if exc.what.startswith("effect: "):
        return Conflict(f"{exc.what.removeprefix('effect: ')}; nothing was changed")
    return lease_lost(plan)


def _text(body: str, content_type: str) -> str:
    if "\x00" in body:
        raise InvalidBody(
            "PostgreSQL text cannot hold NUL characters; send the body as bytes instead"
        )
    if is_json(content_type) and _has_nul(body):
        raise InvalidBody(
            "PostgreSQL's JSON cannot hold NUL characters (\\u0000 in a string); leave them "
            "out, or send the body as bytes"
        )
    return body


def _properties(text: str | None) -> str | None:
    if text is not None and _has_nul(text):
        raise MessageError(
            "PostgreSQL's JSON cannot hold NUL characters (\\u0000 in a string): leave them "
            "out of the properties"
        )
    return text


_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""A JSON escape of NUL (after an even run of backslashes, which are themselves)."""


def _has_nul(json_text: str) -> bool:
    # Stored as text, such a value was taken; then every selection over its queue (a
    # where, an order_by, a subscription's selector, a declared property) failed on
    # its cast to jsonb, a StorageError for every reader of the queue, for ever.
    return "\\u0000" in json_text and _NUL.search(json_text) is not None


def message_rows(rows: list[Row]) -> list[MessageRow]:
    """Message rows, named: a binary body (the column after them) takes the body's place."""
    return [
        message_row(r[:20] if r[20] is None else (*r[:6], bytes(r[20]), *r[7:20])) for r in rows
    ]


def claim_answer(rows: list[Row]) -> tuple[list[MessageRow], tuple[float | None] | None]:
    """A claim's rows, or (an empty claim) none and its answer to ``next_due``: a 1-tuple
    of when the next message is due (None: no message is)."""
    claimed = message_rows(rows)
    if claimed and claimed[0].id is None:
        due = claimed[0].available_at
        return [], (None if due is None else float(due),)
    return claimed, None


class Route(NamedTuple):
    """How a unit of work runs: one statement alone (``single``) or a pipelined
    transaction, and whether it carries its own wake-up NOTIFY."""

    statements: list[tuple[str, Any]]
    single: bool
    durable: bool
    notified: bool


def first(rows: list[Row]) -> Any:
    return rows[0][0] if rows else None


class Expected(StorageError):
    """An ``expect()`` check failed inside the database; ``what`` says which."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def translate(exc: psycopg.Error) -> StorageError:
    """The sluice error for a driver error, by SQLSTATE (and psycopg's class for it)."""
    if exc.sqlstate == EXPECT_FAILED and exc.diag.message_primary:
        return Expected(exc.diag.message_primary)
    if exc.sqlstate == UNIQUE_VIOLATION:
        return Duplicate(f"PostgreSQL refused a duplicate ({exc.diag.constraint_name}): {exc}")
    if exc.sqlstate == OUT_OF_RANGE:
        # Computed in the database from a message's values: an expression (a where=, an
        # order_by, a priority function, a property or a rule) that overflows on one.
        return StorageError(
            f"PostgreSQL could not compute a value ({exc.diag.message_primary}): an "
            "expression's arithmetic overflowed on a message's values (PostgreSQL's double "
            "precision stops at about 1.8e308, where SQLite gives infinity); nothing was "
            "changed: bound the expression's operands or select such messages out"
        )
    if isinstance(exc, psycopg.OperationalError):
        return ConnectionLost(
            f"the PostgreSQL connection failed ({exc}); the outcome of the last operation is "
            "unknown unless it is retried: abort the transaction and start again"
        )
    return StorageError(f"PostgreSQL failed: {exc}")


def no_connection(pool: Any, exc: Exception) -> StorageError:
    """The error for a pool that gave no connection in time (psycopg_pool's PoolTimeout).

    With fewer connections open than its maximum, the pool could not open one: the
    server is unreachable (a restart, most often), so ConnectionLost, which callers
    that retry idempotent work ride out. With all of them open and busy, the pool is
    too small for the load: a plain StorageError that says so.
    """
    stats = pool.get_stats()
    if stats.get("pool_size", 0) < pool.max_size:
        return ConnectionLost(f"no PostgreSQL connection could be opened: {exc}")
    return StorageError(
        f"all {pool.max_size} pooled PostgreSQL connections stayed busy ({exc}): "
        "raise pool_size, or hold transactions for less time"
    )


def server_offset(conn: psycopg.Connection[Any], query: str) -> float:
    """The server's clock minus this host's; 0 when no larger than the reading's own error."""
    before = time.time()
    server = float(first(conn.execute(query).fetchall()))
    return offset_between(server, before, time.time())


def offset_between(server: float, before: float, after: float) -> float:
    """The server's clock, read between ``before`` and ``after`` here, minus this host's."""
    offset = server - (before + after) / 2
    # Half the round trip: what one reading cannot tell apart. On the server's own host
    # the clocks are one, so the offset is 0 exactly.
    return 0.0 if abs(offset) <= (after - before) / 2 else offset
