"""Taking messages for a transaction, and the rules on what it took: the claim per
isolation level (docs/isolation.md), a subscription's claim with its topic's pulls, the
wait for a first message (or for credit); a lane's messages given back last taken first,
no part of a block committed, and the credit of capped queues a commit frees.

Functions of what they are given (a session, a transaction number, what it holds): the
``Transaction`` keeps its state and calls them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sluice.backends.base import Lane, MessageRow, Selection, TxStore
from sluice.catalog import QueueSpec
from sluice.engine import steps, topics
from sluice.engine.steps import Blocking, Call, Steps, Wait
from sluice.engine.wakeups import NO_TOKEN, Token
from sluice.errors import IncompleteBlock, MessageStateError
from sluice.message import Message

if TYPE_CHECKING:
    from sluice.engine.context import EngineContext

__all__ = [
    "QUIET_WAIT",
    "check_blocks",
    "check_release",
    "claim_steps",
    "freed_credit",
    "take_steps",
]

QUIET_WAIT = 0.05
"""The longest a consumer waits without claiming on a queue known to be empty
(``Wakeups.quiet``) before it claims all the same."""


def take_steps(
    context: EngineContext,
    backend: TxStore,
    spec: QueueSpec,
    *,
    session: int,
    tx: int,
    limit: int,
    wait: float,
    deadline: float,
    own: bool,
    select: Selection | None,
    lanes: list[str],
    chain: bool = True,
) -> Steps[list[MessageRow]]:
    """Claim up to ``limit`` of ``spec``'s messages, waiting until ``deadline`` (by the
    monotonic clock) for the first; ``wait`` 0 does not wait for news. ``chain`` False:
    at most one message of each lane (the backend's ``claim``)."""
    queue = spec.name
    wakeups = context.wakeups
    capped = spec.max_in_flight is not None  # its claims take no more than its credit
    # A subscription is woken by its topic's news, and takes its messages first.
    news = (queue,) if spec.topic is None else (queue, spec.topic)
    # A claim any fresh consumer would make alike: what one found, another would.
    plain = spec.kind == "queue" and not (own or select or lanes or capped)
    first = True
    rows: list[MessageRow]
    token: Token
    while True:
        if spec.kind == "queue":
            token = wakeups.token() if wait else NO_TOKEN
            if first and wait and plain and wakeups.quiet(queue, token, context.clock.now()):
                # Found empty, and every message since went to a waiter: wait with them (for
                # QUIET_WAIT at most, in case a woken waiter never took what it was woken for).
                first = False
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    yield Wait(token, min(remaining, QUIET_WAIT), news, limit, plain)
                continue
            first = False
            rows = yield from claim_steps(
                session, tx, queue, spec.isolation, limit, own=own, select=select, lanes=lanes,
                capped=capped, chain=chain,
            )  # fmt: skip
        else:
            # Pulling from its topic is the synchronous backend's work; the token taken
            # with it, before the pull and the claim, in the same turn at the storage.
            token, rows = yield Blocking(
                lambda: _take_subscribed(
                    context,
                    backend,
                    spec,
                    session=session,
                    tx=tx,
                    limit=limit,
                    own=own,
                    select=select,
                    lanes=lanes,
                    capped=capped,
                    wait=bool(wait),
                )
            )
        remaining = deadline - time.monotonic()
        if rows or remaining <= 0:
            return rows
        due: float | None = yield Call("next_due", (queue,), {})
        if plain:
            wakeups.found_empty(queue, token, due)
        if due is not None:
            clock = context.clock  # due by its time; a ManualClock's is polled for
            remaining = min(remaining, clock.real_seconds(max(due - clock.now(), 0.0)))
        yield Wait(token, remaining, news, limit, plain)


def _take_subscribed(
    context: EngineContext, backend: TxStore, spec: QueueSpec, *, session: int, tx: int,
    limit: int, own: bool, select: Selection | None, lanes: list[str], capped: bool,
    wait: bool,
) -> tuple[Token, list[MessageRow]]:  # fmt: skip
    """Claim from a subscription, pulling its topic's messages first where it may need
    them, and once more if the claim comes back short (sluice.engine.topics); and the
    wake-up token (``wait``), taken before all that.

    One turn at the storage for it all: on SQLite, consumer threads sharing a Database
    took it three to five times a message (token, pull's question and write, claim),
    each time queueing behind the others.
    """
    queue, wakeups = spec.name, context.wakeups
    with context.backend.one_turn():
        token = wakeups.token() if wait else NO_TOKEN
        rows = None
        if spec.isolation == "none" and not (own or select or lanes or capped):
            # A plain claim: the backend may send it with the pull, one round trip.
            rows = topics.pull_claim(context, spec, session=session, tx=tx, limit=limit)
        if rows is None:
            asked = topics.before_take(context, spec, everything=select is not None)
            rows = steps.run(claim_steps(session, tx, queue, spec.isolation, limit, own=own,
                                         select=select, lanes=lanes, capped=capped),
                             backend, wakeups)  # fmt: skip
            if len(rows) < limit and not asked and topics.before_take(context, spec, force=True):
                rows += steps.run(claim_steps(session, tx, queue, spec.isolation,
                                              limit - len(rows), own=own, select=select,
                                              lanes=lanes, capped=capped),
                                  backend, wakeups)  # fmt: skip
    topics.taken(context, spec, len(rows))
    return token, rows


def claim_steps(
    session: int,
    tx: int,
    queue: str,
    isolation: str,
    limit: int,
    *,
    own: bool,
    select: Selection | None,
    lanes: list[str],
    capped: bool,
    chain: bool = True,
) -> Steps[list[MessageRow]]:
    """Claim per the queue's isolation level (see docs/isolation.md, "limit").

    On an isolated queue a reader takes a writer's (or block's) messages one
    after the other: a fresh claim takes one head, the rest follow its lane.
    Blockwise, a reader finishes the blocks it holds before it starts another,
    so a dequeue ends at a block boundary when the limit allows.
    """

    def claim(n: int, **more: Any) -> Call:
        options = {"own": own, "select": select, "capped": capped} | more
        if not chain:
            options["chain"] = False
        return Call("claim", (session, tx, queue, n), options)

    blockwise = isolation in ("blockwise", "ordered_blockwise")
    rows: list[MessageRow]
    if lanes:
        rows = yield claim(limit, lanes=lanes, fill=not blockwise)
        if rows or not blockwise:
            return rows
    if isolation == "none":
        rows = yield claim(limit)
        return rows
    rows = yield claim(1)
    taken = sorted(
        {r.lane for r in rows if r.lane is not None and (r.p_session, r.p_tx) != (session, tx)}
    )
    if taken and limit > 1:
        rows += yield claim(limit - 1, lanes=taken, fill=not blockwise)
    elif rows and limit > 1:
        # It took its own enqueue, which is in no lane: the rest as a dequeue of its
        # own would take them. Stopping here returned one message of limit=n while
        # others were ready (docs/isolation.md: other writers fill the rest).
        rows += yield from claim_steps(session, tx, queue, isolation, limit - 1, own=own,
                                       select=select, lanes=lanes, capped=capped)  # fmt: skip
    return rows


def check_blocks(
    context: EngineContext, tx_id: str, held_lanes: Mapping[int, Lane], held: Mapping[int, Message]
) -> Steps[None]:
    """On a blockwise queue, refuse to commit part of a block (the transaction stays open).

    A block's messages wait in its lane in order and the transaction ``tx_id`` owns
    the lane, so the block is incomplete exactly when the lane's oldest waiting
    message belongs to a block it holds messages of (``held_lanes``: the lanes of the
    messages it holds, by ref).
    """
    blocks: dict[str, dict[str, set[tuple[int, int]]]] = {}
    for ref, (queue, lane) in held_lanes.items():
        if lane.startswith("g:"):
            continue  # groups are ordered, never blockwise
        if context.spec(queue).isolation not in ("blockwise", "ordered_blockwise"):
            continue
        producer = held[ref].producer
        blocks.setdefault(queue, {}).setdefault(lane, set()).add(producer)
    for queue, lanes in blocks.items():
        fronts: dict[str, tuple[int, int]] = yield Call("lane_fronts", (queue, sorted(lanes)), {})
        for lane, front in fronts.items():
            if front in lanes[lane]:
                session, tx = front
                raise IncompleteBlock(
                    f"transaction {tx_id} holds part of block {session}/{tx} of queue "
                    f"{queue!r}; take the rest of the block and commit again, or abort "
                    "(the transaction is still open)"
                )


def check_release(message: Message, lane: Lane | None, held_lanes: Mapping[int, Lane]) -> None:
    """Of a lane, the messages taken last go back first: giving back ``message`` (of
    ``lane``) while its holder holds a later one of it would let the later go first."""
    if lane is not None and any(
        ref > message.ref and other == lane for ref, other in held_lanes.items()
    ):
        raise MessageStateError(
            f"message {message.id} has later messages of its "
            f"{'group' if lane[1].startswith('g:') else 'writer'} held by this "
            "transaction; release those first (last taken, first given back), or abort"
        )


def freed_credit(capped: Iterable[str] | None, held: Mapping[int, Message]) -> dict[str, int]:
    """How many of the ``held`` messages are of each ``capped`` queue (max_in_flight): the
    credit their holder's commit frees."""
    counts = dict.fromkeys(capped or (), 0)
    for m in held.values():
        if m.queue in counts:
            counts[m.queue] += 1
    return {queue: count for queue, count in counts.items() if count}
