"""The storage seam: the queue-level operations every backend provides, and what they promise.

The engine (transactions, waiting, recovery policy) talks only to this
protocol. Each method is one atomic unit of work in the database: it either
happens completely or not at all, and a driver error surfaces as a
``StorageError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from sluice.catalog import QueueSpec
from sluice.clock import Clock
from sluice.errors import ConfigurationError, QueueInUse
from sluice.expr.nodes import Node

if TYPE_CHECKING:
    import pyarrow as pa  # sluice[spark]

__all__ = [
    "MESSAGE_COLUMNS",
    "SLOTS",
    "STREAM_LEASE",
    "Backend",
    "CommitPlan",
    "Envelope",
    "Lane",
    "PropertyDef",
    "Row",
    "Selection",
    "SessionInfo",
    "SparkBackend",
    "StagedPart",
    "StreamState",
    "TxBackend",
    "browse_params",
    "isolation_in_use",
    "lane_of",
    "queue_in_use",
    "sink_seen",
    "stream_host",
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


def browse_params(
    queue: str, state: str, limit: int, session: int, tx: int, *, now: float
) -> dict[str, Any]:
    """The parameters of every backend's browse query (``now``: by the backend's clock)."""
    return {
        "queue": queue,
        "state": state,
        "limit": limit,
        "session": session,
        "tx": tx,
        "now": now,
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
class SessionInfo:
    """A registered session: one process's connection to the queues, kept alive by heartbeat."""

    id: int
    host: str
    pid: int
    heartbeat_at: float
    lease: float


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


class TxBackend(Protocol):
    """The operations a queue transaction uses; a Backend, or one bound to a caller's connection."""

    def append(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> None: ...

    def claim(
        self,
        session: int,
        tx: int,
        queue: str,
        limit: int,
        *,
        own: bool,
        select: Selection | None = None,
        lanes: Sequence[str] = (),
        fill: bool = True,
    ) -> list[Row]: ...

    def release(
        self, session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None: ...

    def commit(self, plan: CommitPlan) -> None: ...

    def abort(
        self, session: int, tx: int, held: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None: ...

    def lane_fronts(self, queue: str, lanes: Sequence[str]) -> dict[str, tuple[int, int]]:
        """For each lane, the writer and transaction of its oldest message still waiting."""
        ...

    def browse(
        self,
        queue: str,
        state: str,
        limit: int,
        session: int,
        tx: int,
        *,
        select: Selection | None = None,
    ) -> list[Row]: ...

    def next_due(self, queue: str) -> float | None: ...


class Backend(Protocol):
    """Queue storage. Methods are atomic; none is called with a lock of the caller's held.

    Durability: ``commit`` (of a ``durable`` plan), ``append`` of ready
    messages and the catalog changes survive a power cut once they return.
    ``claim``, ``release``, ``abort``, ``heartbeat`` and ``recover`` need only
    survive a process crash: a power cut that undoes them also ends the
    sessions involved, and recovery then reaches the same state.
    """

    dialect: str
    polled_for_changes: bool
    """True when other processes may change the data and the backend cannot push the news
    (``on_change``), so waiters must poll ``change_token``."""
    clock: Clock
    """The time messages are judged by (enqueued, available, expired); the Database sets it.
    Session heartbeats and leases are not: they stay on real time."""

    def close(self) -> None:
        """Release the connection(s). Idempotent."""

    # --- sessions and recovery -------------------------------------------------------
    def open_session(self, host: str, pid: int, lease: float) -> int:
        """Register a session and return its id; ids are never reused."""

    def heartbeat(self, session: int) -> bool:
        """Extend the session's lease; False if the session was already rolled back."""

    def close_session(self, session: int) -> None:
        """Roll back whatever the session still holds, then forget it. Idempotent."""

    def recover(self, is_dead: Callable[[SessionInfo], bool]) -> list[int]:
        """Roll back every session ``is_dead`` condemns, and expire overdue messages.

        Runs in one database transaction, so each dead session is rolled back
        exactly once however many nodes try at the same time. Returns the ids.
        """

    # --- catalog ---------------------------------------------------------------------
    def create_queue(self, spec: QueueSpec) -> None:
        """Add a queue; QueueExists if the name is taken."""

    def alter_queue(self, spec: QueueSpec) -> None:
        """Replace a queue's settings; QueueNotFound if missing."""

    def drop_queue(self, name: str) -> None:
        """Remove a queue and all its messages; QueueInUse if another queue names it."""

    def get_queue(self, name: str) -> QueueSpec | None:
        """A queue's settings, or None."""

    def list_queues(self) -> list[QueueSpec]:
        """All queues, by name."""

    # --- content catalog: message types and declared properties ---------------------
    def create_type(self, name: str, kind: str, definition: str) -> None:
        """Record a message type; ConfigurationError if the name is taken."""

    def message_types(self) -> dict[str, tuple[str, str]]:
        """Every message type: name -> (kind, definition)."""

    def create_property(
        self,
        name: str,
        expression: str,
        type: str,
        fills: Mapping[str, tuple[str, str, Any]],
        *,
        indexed: bool = True,
    ) -> None:
        """Declare a property on queues and compute it for the messages they hold already.

        ``fills`` maps each queue to (slot, SQL expression of this dialect, its
        parameters); the SQL reads the message row as ``m``. One transaction.
        ``indexed``: give the slots their index (left out where another index serves).
        """

    def queue_properties(self, queue: str) -> list[PropertyDef]:
        """The properties declared on a queue, with their slots."""

    # --- messages --------------------------------------------------------------------
    def append(
        self, session: int, tx: int, envelopes: Sequence[Envelope], *, ready: bool, durable: bool
    ) -> None:
        """Store messages: visible at once (``ready``) or pending for their transaction.

        QueueNotFound (and nothing stored) if any target queue does not exist.
        """

    def claim(
        self,
        session: int,
        tx: int,
        queue: str,
        limit: int,
        *,
        own: bool,
        select: Selection | None = None,
        lanes: Sequence[str] = (),
        fill: bool = True,
    ) -> list[Row]:
        """Claim up to ``limit`` available messages, highest priority first, FIFO within one.

        ``own`` includes the transaction's own pending enqueues. ``select`` keeps
        only the messages its condition holds for, and orders by its keys first.
        Of a lane only its head is claimable; ``lanes``, those the transaction
        holds messages of, offer their next message too. When ``limit`` asks for
        more, the lanes taken in this call offer theirs as well. ``fill`` False:
        with ``lanes``, only their messages (finish what it holds first).
        """

    def release(
        self, session: int, tx: int, refs: Sequence[int], lanes: Sequence[Lane] = ()
    ) -> None:
        """Give back held messages to their original place.

        Each counts an attempt; a message out of attempts goes to its error queue.
        ``lanes``: the lanes of the messages, whose heads are then put right.
        """

    def commit(self, plan: CommitPlan) -> None:
        """Publish the transaction's enqueues and settle what it holds, all at once."""

    def abort(self, session: int, tx: int, held: Sequence[int], lanes: Sequence[Lane] = ()) -> None:
        """Undo the transaction: drop its pending enqueues, release what it holds. Idempotent."""

    def lane_fronts(self, queue: str, lanes: Sequence[str]) -> dict[str, tuple[int, int]]:
        """For each lane, the writer and transaction of its oldest message still waiting."""

    def browse(
        self,
        queue: str,
        state: str,
        limit: int,
        session: int,
        tx: int,
        *,
        select: Selection | None = None,
    ) -> list[Row]:
        """Messages of a queue in delivery order (or ``select``'s), without claiming them."""

    def purge(self, queue: str, state: str, before: float) -> int:
        """Delete the queue's ``expired`` or ``failed`` messages enqueued before ``before``."""

    def stats(self, queue: str) -> dict[str, int]:
        """Message counts by state name, with ``delayed`` apart from ``ready``."""

    def next_due(self, queue: str) -> float | None:
        """When the earliest delayed message of the queue becomes available."""

    def change_token(self) -> int:
        """A number that changes when another connection commits a change."""

    def on_change(self, callback: Callable[[str | None], None]) -> None:
        """Have ``callback(queue)`` called when another process may have added to ``queue``.

        ``queue`` None: to any queue.

        Backends that can push such news (PostgreSQL's LISTEN) do; the others
        leave waiters to poll ``change_token``.
        """


# --- Spark streams and sinks (sluice.spark) -------------------------------------------

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


class SparkBackend(Protocol):
    """What the Spark source and sink need of a backend, each method one atomic unit."""

    def open_stream(self, queue: str, name: str) -> StreamState:
        """The stream ``name`` of ``queue``, created with its session if new."""

    def set_stream_round(self, session: int, round: int) -> None:
        """Record the last round begun, durably (with the claims made before it)."""

    def set_stream_acked(self, session: int, acked: int) -> None:
        """Record the last round acknowledged."""

    def stream_held(
        self,
        session: int,
        queue: str,
        after: int,
        upto: int,
        *,
        part: int = 0,
        parts: int = 1,
        spooled: bool = True,
    ) -> list[Row]:
        """Messages the stream holds from rounds (after, upto], id modulo ``parts`` = ``part``.

        Rows in MESSAGE_COLUMNS order and then the round, by round and id; without
        the spooled ones (stream_spooled) if ``spooled`` is false.
        """

    def stream_spooled(
        self, session: int, after: int, upto: int, *, part: int = 0, parts: int = 1
    ) -> list[pa.Table]:
        """The rounds (after, upto] a backend keeps moved out of the queue, id mod parts = part.

        Arrow tables of the MESSAGE_COLUMNS, ``body_bytes`` (hex text) and ``round``:
        a reader can convert them without a Python object per message. Their rows are
        among stream_held's too; backends that claim in place return none.
        """

    def stream_held_count(self, session: int, queue: str, after: int, upto: int) -> int:
        """How many messages the stream holds from rounds (after, upto]."""

    def stream_claim(
        self, session: int, round: int, queue: str, limit: int, select: Selection | None
    ) -> int:
        """Claim up to ``limit`` ready messages in delivery order for the stream's ``round``.

        How many it took. Of a lane only its head is ready: a queue with lanes gets at
        most one message of each lane per call (the engine's claim takes their runs).
        Not durable by itself: set_stream_round's commit makes it so.
        """

    def stream_settle(self, session: int, queue: str, after: int, upto: int) -> None:
        """Spark committed rounds (after, upto]: settle them, in one transaction.

        What the stream holds of them is deleted, their lanes get heads, and ``upto``
        is recorded as acknowledged.
        """

    def scan(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> list[Row]:
        """Up to ``limit`` messages in ``state`` (as browse) with ids in (after, upto], by id."""

    def id_bounds(self, queue: str) -> tuple[int, int, int]:
        """The lowest and highest id of the queue's messages, and how many there are."""

    def drop_stream(self, queue: str, name: str) -> bool:
        """Forget a stream, giving back what it holds; False if there was none."""

    def sink_batch(self, sink: str) -> int | None:
        """The last micro-batch the streaming sink published, or None."""

    def forget_sink(self, sink: str) -> None:
        """Forget a streaming sink's last batch (its query starts over)."""

    def close_staging(self, host: str, batch: int | None = None) -> None:
        """End every session labelled ``host`` (an aborted batch write's), dropping their rows.

        With ``batch``: only those of that micro-batch (an aborted streaming batch's).
        """

    def publish_staged(
        self, parts: Sequence[StagedPart], sink: str | None = None, batch: int = 0
    ) -> bool:
        """Publish staged messages at once and end their sessions; False if ``sink`` had ``batch``.

        LeaseLost, and nothing published, if a part's rows are not all there.
        """


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


class JobsBackend(Protocol):
    """What jobs, tasks, profiles and schedules need of a SQL backend (docs/jobs.md).

    The statements are jobs.sql's named queries. Both backends implement it.
    """

    def jobs_read(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        """Run one read-only statement; its rows."""
        ...

    def jobs_write(self, steps: Sequence[Effect], *, durable: bool = True) -> bool:
        """Run ``steps`` as one database transaction, all or nothing.

        A step whose row count is not its ``expect`` rolls the whole unit back:
        then nothing changed and the answer is False. Atomic; idempotent only if
        the steps are.
        """
        ...
