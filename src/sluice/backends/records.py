"""The values that cross the storage seam: envelopes in, message rows out, commit plans.

Plain immutable records (named tuples where they are bound as SQL parameters or
built per message), shared by the engine and every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple, TypeVar

from sluice.errors import ConfigurationError, ConnectionLost, LeaseLost, QueueInUse, StorageError
from sluice.expr.nodes import Node

_R = TypeVar("_R", bound=tuple[Any, ...])

__all__ = [
    "COUNTED_STATES",
    "MESSAGE_COLUMNS",
    "READ_COLUMNS",
    "SLOTS",
    "STREAM_LEASE",
    "CommitPlan",
    "ConnectionLost",
    "Duplicate",
    "Effect",
    "Envelope",
    "HeldRow",
    "IdempotentRequest",
    "Lane",
    "MessageRow",
    "PropertyDef",
    "QueueCounts",
    "Reached",
    "Row",
    "Selection",
    "SessionInfo",
    "StagedPart",
    "StoredGateway",
    "StoredKey",
    "StoredProperty",
    "StoredSqsQueue",
    "StreamState",
    "Unchanged",
    "browse_params",
    "held_row",
    "isolation_in_use",
    "lane_of",
    "lease_lost",
    "merged_acks",
    "message_row",
    "plain_ack",
    "queue_in_use",
    "run_steps",
    "sink_host",
    "sink_seen",
    "stream_host",
    "write_host",
]

MESSAGE_COLUMNS = (
    "id",
    "state",
    "priority",
    "p_session",
    "p_tx",
    "p_num",
    "body",
    "content_type",
    "properties",
    "correlation_id",
    "reply_to",
    "enqueued_at",
    "available_at",
    "expires_at",
    "attempts",
    "error",
    "origin_queue",
    "type",
    "grp",
    "lane",
)
"""The order of the columns in every message row a backend returns."""

Row = tuple[Any, ...]
"""A row of any other statement (sessions, jobs, catalog), read by position."""


class MessageRow(NamedTuple):
    """A message row as backends return it (claim, browse, scan): MESSAGE_COLUMNS, named."""

    id: int
    state: int
    """A MessageState code (0-5)."""
    priority: int
    p_session: int
    p_tx: int
    p_num: int
    body: str | bytes
    content_type: str
    properties: str | None
    correlation_id: str | None
    reply_to: str | None
    enqueued_at: float
    available_at: float
    expires_at: float | None
    attempts: int
    error: str | None
    origin_queue: str | None
    type: str | None
    grp: str | None
    lane: str | None


def _row_maker(kind: type[_R]) -> Callable[[Iterable[Any]], _R]:
    # tuple.__new__ bound to the class, called from C: about half of ``_make``'s cost,
    # which checks the length in Python (the statements give every row its columns).
    return partial(tuple.__new__, kind)


message_row = _row_maker(MessageRow)
"""A MessageRow from a row of the message columns (``message_row``, faster)."""


class HeldRow(NamedTuple):
    """A message a Spark stream holds: MESSAGE_COLUMNS, named, then the round it was taken in."""

    id: int
    state: int
    priority: int
    p_session: int
    p_tx: int
    p_num: int
    body: str | bytes
    content_type: str
    properties: str | None
    correlation_id: str | None
    reply_to: str | None
    enqueued_at: float
    available_at: float
    expires_at: float | None
    attempts: int
    error: str | None
    origin_queue: str | None
    type: str | None
    grp: str | None
    lane: str | None
    round: int


held_row = _row_maker(HeldRow)
"""A HeldRow from a row of the message columns and the round (``held_row``, faster)."""


def browse_params(
    queue: str,
    state: str,
    limit: int,
    session: int,
    tx: int,
    *,
    now: float,
    after: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The parameters of every backend's browse query (``now``: by the backend's clock;
    ``after``: the (priority, id) a page starts after)."""
    after_priority, after_id = after if after is not None else (None, None)
    return {
        "queue": queue,
        "state": state,
        "limit": limit,
        "session": session,
        "tx": tx,
        "now": now,
        "after_priority": after_priority,
        "after_id": after_id,
    }


def isolation_in_use(name: str) -> QueueInUse:
    """Why a queue's isolation level cannot change now."""
    return QueueInUse(
        f"queue {name!r} holds messages: its isolation level can change only while it is "
        "empty (messages get their lanes when enqueued)"
    )


def queue_in_use(name: str, *, error_queue_of: Sequence[str] = (), busy: int = 0) -> QueueInUse:
    """Why ``name`` cannot be dropped: other queues' error queue, or open transactions' work."""
    if error_queue_of:
        return QueueInUse(
            f"queue {name!r} is the error queue of {', '.join(map(repr, error_queue_of))}; "
            "alter those queues first"
        )
    return QueueInUse(
        f"queue {name!r} has {busy} message(s) held or enqueued by open "
        "transactions; drop it once they have ended"
    )


class Envelope(NamedTuple):
    """A message on its way into a queue, already encoded (a tuple: it is bound as parameters)."""

    queue: str
    num: int
    priority: int
    body: str | bytes
    content_type: str
    properties: str | None
    correlation_id: str | None
    reply_to: str | None
    enqueued_at: float
    available_at: float
    expires_at: float | None
    type: str | None = None
    keys: tuple[Any, ...] | None = None
    """Declared properties' values in SLOTS order; None for a queue without properties."""
    group: str | None = None
    lane: str | None = None
    """The ordering unit the message waits in (see ``lane_of``); None: free."""


Lane = tuple[str, str]
"""A lane of a queue: (queue name, lane key)."""


def lane_of(isolation: str, group: str | None, session: int, tx: int) -> str | None:
    """The lane a message enters: its group, else its writer or block as the level says.

    A lane's messages are taken one after the other in enqueue order, and by
    one reader transaction at a time (docs/isolation.md). The prefixes keep a
    group named like a writer apart from it.
    """
    if group is not None:
        return f"g:{group}"
    if isolation in ("ordered", "ordered_blockwise"):
        return f"w:{session}"
    if isolation == "blockwise":
        return f"b:{session}.{tx}"
    return None


SLOTS = ("t1", "t2", "t3", "t4", "n1", "n2", "n3", "n4")
"""The columns declared properties are stored in: text in t1-t4, numbers in n1-n4."""


@dataclass(frozen=True, slots=True)
class Selection:
    """A selective or ordering dequeue: which messages, in which order (checked trees).

    ``slots`` maps the queue's declared properties to their columns. ``key``
    identifies the selection, so backends can cache what they compile from it.
    """

    key: str
    where: Node | None
    order: tuple[tuple[Node, bool], ...]
    slots: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PropertyDef:
    """A declared property as the catalog records it, with its slot in one queue."""

    name: str
    expression: str
    type: str
    slot: str


@dataclass(frozen=True, slots=True)
class IdempotentRequest:
    """A request made with an Idempotency-Key as the store keeps it: the fingerprint of
    the request, and its HTTP ``status`` and JSON ``answer`` once it ran (None while it
    runs); ``started_at`` in seconds since the epoch."""

    fingerprint: str
    status: int | None
    answer: str | None
    started_at: float


COUNTED_STATES = ("ready", "delayed", "pending", "claimed", "expired", "failed", "done")
"""The keys of ``stats()`` counts, in the order they are shown."""


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """A queue's counts as ``stats()`` has them, and when its oldest ready message became
    available (epoch seconds; None: nothing is ready). Its own rows only: a
    subscription's messages still in its topic are not counted here."""

    counts: dict[str, int]
    oldest_ready: float | None


@dataclass(frozen=True, slots=True)
class StoredGateway:
    """A gateway queue as the store keeps it (sluice.gateways): its queue, ``direction``
    (``in`` or ``out``), ``transport`` and the transport's settings as JSON text."""

    queue: str
    direction: str
    transport: str
    settings: str
    created_at: float


@dataclass(frozen=True, slots=True)
class StoredSqsQueue:
    """What the SQS endpoint keeps of a queue (sluice.server.sqs): its SQS attributes and
    tags as JSON text, and when it was created and last changed through SQS."""

    attributes: str
    tags: str
    created_at: float
    changed_at: float


@dataclass(frozen=True, slots=True)
class StoredKey:
    """An API key of the HTTP server as the store keeps it (sluice.server.grants), without
    the hash of its secret: nothing read from the store needs it.

    ``grants`` is the JSON text the server made of the key's grants; the times are
    seconds since the epoch, ``used_at`` None until the key is first used and
    ``revoked_at`` None while it is valid.
    """

    name: str
    grants: str
    admin: bool
    created_at: float
    used_at: float | None
    revoked_at: float | None


@dataclass(frozen=True, slots=True)
class StoredProperty:
    """A property a queue's messages carry in their properties JSON (any number of them).

    ``expression`` computes it at enqueue (None: set by the producer, or by a rule);
    ``type`` is text, integer, real, boolean or timestamp (seconds since the epoch) and
    every value set is checked against it; a ``fixed`` one is computed only.
    """

    name: str
    type: str
    expression: str | None
    fixed: bool


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A registered session: one process's connection to the queues, kept alive by heartbeat."""

    id: int
    host: str
    pid: int
    heartbeat_at: float
    lease: float
    heartbeat_mono: float | None = None
    """The heartbeat on its host's monotonic clock, where the backend keeps it (SQLite):
    comparable with this process's ``time.monotonic()`` on the same host and boot."""


class Effect(NamedTuple):
    """A named statement (sluice/sql/<dialect>/jobs.sql) that commits with a queue transaction.

    ``expect``: the number of rows it must change, or the commit fails with
    ``Conflict`` and changes nothing (None: any). On PostgreSQL the statement
    checks it itself with ``expect()``; SQLite checks the row count.
    """

    name: str
    params: Mapping[str, Any]
    expect: int | None = None


@dataclass(slots=True)
class CommitPlan:
    """Everything a commit must do, so a backend can do it as one database transaction.

    ``pending`` is the number of pending rows and ``held`` the rows the
    transaction claimed and still holds: finding fewer means the session was
    rolled back by recovery, and the commit must fail with ``LeaseLost``
    without changing anything.
    """

    session: int
    tx: int
    enqueues: Sequence[Envelope] = ()
    pending: int = 0
    held: Sequence[int] = ()
    rejects: dict[int, str] = field(default_factory=dict)
    durable: bool = True
    lanes: Sequence[Lane] = ()
    """Lanes whose head may change: those of held messages and of enqueues."""
    effects: Sequence[Effect] = ()
    """Further statements of the same database transaction, after the queue's."""
    kept: Sequence[int] = ()
    """Of ``held``, those whose queue keeps settled messages (``retention``): they become
    done (state 6) with ``settled_at`` instead of being deleted. Never a rejected one."""
    settled_at: float = 0.0
    """When the kept messages were settled, by the Database's clock."""
    freed: Sequence[str] = ()
    """Queues with max_in_flight whose credit settling ``held`` frees: their waiters in
    other processes are told (where a backend does not tell them of every commit)."""


def plain_ack(plan: CommitPlan) -> bool:
    """Whether ``plan`` only deletes what it holds (the commonest commit)."""
    return bool(plan.held) and not (
        plan.rejects or plan.pending or plan.enqueues or plan.lanes or plan.effects or plan.kept
    )


def merged_acks(plans: Sequence[CommitPlan]) -> list[CommitPlan]:
    """Plain acks (``plain_ack``) as one plan per transaction number: the same rows
    deleted, fewer statements."""
    merged: dict[tuple[int, int], CommitPlan] = {}
    for plan in plans:
        key = (plan.session, plan.tx)
        into = merged.get(key)
        if into is None:
            merged[key] = replace(plan, held=list(plan.held))
        else:
            into.held = [*into.held, *plan.held]
            into.durable = into.durable or plan.durable
    return list(merged.values())


STREAM_LEASE = 1e12
"""A stream's session never expires: what it holds waits for the query's restart."""


def stream_host(queue: str, name: str) -> str:
    """The host column of a stream's session (pid 0: no process to watch)."""
    return f"stream:{queue}/{name}"


def sink_host(sink: str) -> str:
    """The host column of a streaming sink's staging sessions; their pid is the batch id.

    When batch N is published, every other staging session of the sink up to N
    (a killed or retried task's, a crashed driver's) is orphaned: it is closed in
    the same transaction, and its rows go.
    """
    return f"spark-sink:{sink}"


def write_host(write: str) -> str:
    """The host column of a batch write's sessions: the driver's (pid -1) and each task's.

    Aborting the write closes them all at once (``close_staging``), including
    those of tasks Spark did not report to the driver.
    """
    return f"spark-write:{write}"


class StreamState(NamedTuple):
    """A Spark stream's consumer: its session, last round begun, last round acknowledged."""

    session: int
    round: int
    acked: int


class StagedPart(NamedTuple):
    """Messages a Spark task staged as pending rows of its session, for the driver to publish."""

    session: int
    tx: int
    rows: int
    lanes: tuple[Lane, ...] = ()


READ_COLUMNS = (
    "id",
    "message_id",
    "priority",
    "body",
    "body_bytes",
    "content_type",
    "properties",
    "type",
    "grp",
    "correlation_id",
    "reply_to",
    "attempts",
    "enqueued_at",
    "available_at",
    "expires_at",
)
"""The columns of a Spark read's rows (``Streams.scan``, ``stream_rows``): only what a
Spark row shows, the message id spelled "session/tx/num" by the database, a binary
body as bytes in ``body_bytes`` or in ``body``. Plain tuples, not named rows: a read
of a million messages makes no object per message it does not need."""


@dataclass(frozen=True, slots=True)
class Reached:
    """How far a position stream's acknowledged micro-batches reached (``stream_settle``).

    A position stream reads a queue's messages by id range, which holds still once read:
    ids follow commit order within a queue. The queue's ``pointer`` records the end.
    """

    position: int
    """The end of the last range acknowledged: the queue's pointer moves up to it."""
    at: float
    """When that range was planned: it read what was due and unexpired then."""
    remove: bool
    """Delete what the ranges read (an exclusive stream of a queue), from the pointer on;
    a subscription's stream only moves its pointer past its topic's messages."""
    select: Selection | None = None
    """What the stream reads (its where), for ``remove``."""


def sink_seen(sink: str, batch: int, last: int | None) -> bool:
    """Whether a streaming sink already published ``batch`` (Spark replays only its last).

    A batch below the last published one means the query's checkpoint was
    replaced: publishing would duplicate, skipping would lose, so it is refused.
    """
    if last is None or batch > last:
        return False
    if batch == last:
        return True
    raise ConfigurationError(
        f"sink {sink!r} has published micro-batch {last}, and now gets batch {batch}: "
        "its checkpoint was reset or belongs to another query; give the sink a new name "
        "(or call sluice.spark.forget_sink)"
    )


class Unchanged(Exception):
    """A jobs step changed other than the rows it expected: the unit rolls back."""


def run_steps(execute: Callable[[str, Mapping[str, Any]], int], steps: Sequence[Effect]) -> None:
    """Run ``steps`` through ``execute`` (name, params -> rows changed), checking expectations.

    Raises Unchanged at the first step that changed other than its ``expect``.
    """
    for step in steps:
        changed = execute(step.name, step.params)
        if step.expect is not None and changed != step.expect:
            raise Unchanged(step.name)


class Duplicate(StorageError):
    """A unique constraint refused a row (translated from the driver's error code once, at
    the backend's boundary; the caller says what was duplicated)."""


def lease_lost(plan: CommitPlan) -> LeaseLost:
    """What a commit raises when recovery rolled its session back meanwhile."""
    return LeaseLost(
        f"transaction {plan.session}/{plan.tx} was rolled back because its session's lease "
        "expired (the process stalled or lost the database); nothing of it was committed"
    )
