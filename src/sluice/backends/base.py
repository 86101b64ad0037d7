"""The storage seam: what the engine needs of a backend, as small protocols mypy checks.

A backend is a ``MessageStore`` (the queue-level operations a transaction and a
queue handle use) plus the capabilities every backend has: ``Sessions``,
``Catalog``, ``ChangeFeed``, ``Streams`` and ``Sinks`` (Spark),
``JobsStatements``, ``Expressions``, ``Topics``, ``Retention``, ``RuleStore``,
``KeyStore``, ``IdempotencyStore`` and ``GatewayStore``. ``Backend``
joins them; each backend class names the protocols it implements, so mypy
checks it against each.
The one optional capability, ``Outbox`` (a queue transaction inside the caller's
own database transaction), is an attribute that is None where a backend has none.

Each method is one atomic unit of work in the database: it either happens
completely or not at all, and a driver error surfaces as a ``StorageError``
(translated once, at the backend's boundary). Durability: ``commit`` (of a
``durable`` plan), ``append`` of ready messages and the catalog changes survive
a power cut once they return. ``claim``, ``release``, ``abort``, ``heartbeat``
and ``recover`` need only survive a process crash: a power cut that undoes them
also ends the sessions involved, and recovery then reaches the same state. No
method is called with a lock of the caller's held.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sluice.backends.records import (
    MESSAGE_COLUMNS,
    SLOTS,
    STREAM_LEASE,
    CommitPlan,
    Effect,
    Envelope,
    HeldRow,
    IdempotentRequest,
    Lane,
    MessageRow,
    PropertyDef,
    QueueCounts,
    Row,
    Selection,
    SessionInfo,
    StagedPart,
    StoredGateway,
    StoredKey,
    StoredProperty,
    StreamState,
    lane_of,
)
from sluice.backends.topics import Backlog
from sluice.catalog import QueueSpec
from sluice.clock import Clock
from sluice.expr.sql import RelationSource, SqlCompiler

if TYPE_CHECKING:
    import pyarrow as pa  # sluice-queue[spark]

T = TypeVar("T")

__all__ = [
    "MESSAGE_COLUMNS",
    "READ_COLUMNS",
    "SLOTS",
    "STREAM_LEASE",
    "Backend",
    "Backlog",
    "Catalog",
    "ChangeFeed",
    "CommitPlan",
    "Effect",
    "Envelope",
    "Expressions",
    "GatewayStore",
    "HeldRow",
    "IdempotencyStore",
    "JobsStatements",
    "KeyStore",
    "Lane",
    "MessageRow",
    "MessageStore",
    "Outbox",
    "PropertyDef",
    "QueueCounts",
    "Reached",
    "Retention",
    "Row",
    "RuleStore",
    "RuleUnit",
    "Selection",
    "SessionInfo",
    "Sessions",
    "Sinks",
    "StagedPart",
    "StoredGateway",
    "StoredKey",
    "StoredProperty",
    "StreamState",
    "Streams",
    "Topics",
    "TxStore",
    "lane_of",
]


class TxStore(Protocol):
    """The operations a queue transaction uses: a backend's, or the outbox's on a caller's
    connection (``Outbox.bind``)."""

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
        capped: bool = False,
    ) -> list[MessageRow]:
        """Claim up to ``limit`` available messages, highest priority first, FIFO within one.

        ``own`` includes the transaction's own pending enqueues. ``select`` keeps
        only the messages its condition holds for, and orders by its keys first.
        Of a lane only its head is claimable; ``lanes``, those the transaction
        holds messages of, offer their next message too. When ``limit`` asks for
        more, the lanes taken in this call offer theirs as well. ``fill`` False:
        with ``lanes``, only their messages (finish what it holds first).
        ``capped``: the queue has ``max_in_flight``; the claim then takes no more
        than the queue's credit (its cap less its claimed messages), counted in
        the same database transaction, so that concurrent claimers, in any
        process, never hold more than the cap together.
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
        after: tuple[int, int] | None = None,
    ) -> list[MessageRow]:
        """Messages of a queue in delivery order (or ``select``'s), without claiming them.

        ``after``: the (priority, id) position the page starts after.
        """

    def next_due(self, queue: str) -> float | None:
        """When the earliest delayed message of the queue becomes available."""


class MessageStore(TxStore, Protocol):
    """The core message store: a transaction's operations plus a queue's housekeeping."""

    def purge(self, queue: str, state: str, before: float) -> int:
        """Delete the queue's ``expired`` or ``failed`` messages enqueued before ``before``,
        or its ``done`` ones settled before it."""

    def retry_failed(
        self,
        queue: str,
        *,
        select: Selection | None,
        ref: int | None,
        allowed: Callable[[str], bool],
    ) -> tuple[dict[str, int], dict[str, int]]:
        """Move the queue's failed messages (rejected or out of attempts, held by no one)
        that ``select`` matches, or the one stored at ``ref``, back to the queues they
        came from, ready and with no attempts counted, in one database transaction.

        Only those whose queue ``allowed`` accepts and still exists move. Returns the
        counts moved and the counts left, each by the queue the messages came from.
        """

    def discard_failed(self, queue: str, *, select: Selection | None, ref: int | None) -> int:
        """Delete the queue's failed messages that ``select`` matches (or the one at
        ``ref``) in one statement; returns how many went."""

    def stats(self, queue: str) -> dict[str, int]:
        """Message counts by state name, with ``delayed`` apart from ``ready``."""

    def stats_all(self) -> dict[str, QueueCounts]:
        """Every queue that has messages: its ``stats`` counts and its oldest ready
        message's time, in one statement (the server's metrics read them at each
        scrape). A queue without messages is absent."""


class Retention(Protocol):
    """Kept outcomes (docs/retention.md): a queue with ``retention`` keeps what its
    transactions settle as done (``CommitPlan.kept``) until it is that old."""

    def remove_kept(self, limit: int) -> int:
        """Delete at most ``limit`` done messages past their queue's retention; how many.

        One statement through the settled-time index (never a scan of a queue), so
        the caller bounds each unit; not durable (a power cut that undoes it only
        leaves the work for the next call). Concurrent callers never remove a
        message twice.
        """


class Sessions(Protocol):
    """Sessions (one per connected process) kept alive by heartbeat, and undo-only recovery."""

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


class Catalog(Protocol):
    """Queues, message types and declared properties."""

    def create_queue(
        self, spec: QueueSpec, *, pointer: int | None = None, owner_session: int | None = None
    ) -> None:
        """Add a queue; QueueExists if the name is taken.

        A subscription (``spec.kind``) starts after its topic's message ``pointer``
        (None: after the last one); ``owner_session``: the session a non-durable
        one ends with. QueueNotFound if its topic is not a topic.
        """

    def alter_queue(self, spec: QueueSpec) -> None:
        """Replace a queue's settings; QueueNotFound if missing."""

    def set_paused(self, name: str, paused: bool) -> None:
        """Pause a queue (True) or resume it; QueueNotFound if missing.

        While paused every claim on it, by any process, takes nothing (the claim's own
        statement reads the flag). Resuming tells other processes' waiters of it.
        """

    def drop_queue(self, name: str) -> None:
        """Remove a queue and all its messages; QueueInUse if another queue names it."""

    def get_queue(self, name: str) -> QueueSpec | None:
        """A queue's settings, or None."""

    def list_queues(self) -> list[QueueSpec]:
        """All queues, by name."""

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

    def stored_properties(self, queue: str) -> list[StoredProperty]:
        """The properties a queue's messages carry in their properties JSON, by name."""

    def set_stored_properties(self, queue: str, properties: Sequence[StoredProperty]) -> None:
        """Replace a queue's stored properties (one transaction); QueueNotFound if none."""


class ChangeFeed(Protocol):
    """How waiters learn that another process may have made messages available."""

    polled_for_changes: bool
    """True when other processes may change the data and the backend cannot push the news
    (``on_change``), so waiters must poll ``change_token``."""

    def change_token(self) -> int:
        """A number that changes when another connection commits a change."""

    def on_change(self, callback: Callable[[str | None], None]) -> None:
        """Have ``callback(queue)`` called when another process may have added to ``queue``.

        ``queue`` None: to any queue.

        Backends that can push such news (PostgreSQL's LISTEN, SQLite's watcher on
        Linux) do; the others leave waiters to poll ``change_token``.
        """

    def waiting(self, wanted: bool) -> None:
        """Someone in this process waits for news now (True), or nobody does any more.

        A backend may push news only while it is wanted (SQLite's watcher rests
        otherwise); waiters then compare ``change_token`` once after saying so,
        for news that came before the pushing resumed.
        """


class Expressions(Protocol):
    """Compiling sluice expressions into this backend's SQL (declared properties)."""

    def expression_compiler(self) -> SqlCompiler:
        """A compiler of expressions for this backend's SQL, reading the message row as ``m``."""
        ...


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


class Streams(Protocol):
    """What the Spark source needs: streams with rounds, reads by id range, positions."""

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
    ) -> list[HeldRow]:
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

    def stream_settle(
        self, session: int, queue: str, after: int, upto: int, *, reached: Reached | None = None
    ) -> None:
        """Spark committed rounds (after, upto]: settle them, in one transaction.

        What the stream holds of them is deleted (kept as done where the queue has
        ``retention``), their lanes get heads, and ``upto`` is recorded as acknowledged.
        ``reached``: a position stream's ranges up to it are done too: ``queue``'s pointer
        moves to it (never back), and with ``remove`` the messages those ranges read,
        between the old pointer and it, are deleted.
        """

    def stream_pointer(self, queue: str) -> int:
        """The queue's pointer: how far its position stream has read (a subscription's
        place in its topic). QueueNotFound if there is no such queue."""

    def stream_last(self, queue: str, after: int, ceiling: int = ...) -> int | None:
        """The highest message id of ``queue`` in (after, ceiling] (no ceiling by default),
        pending messages aside, or None."""

    def stream_span(
        self,
        queue: str,
        after: int,
        *,
        limit: int,
        ceiling: int,
        now: float,
        select: Selection | None,
    ) -> tuple[int, int]:
        """The end of a position stream's next range of ``queue``'s messages after ``after``,
        and how many messages it found (at most ``limit``: fewer, and it reached the end).

        It holds up to ``limit`` messages ``select`` holds for that are ready or waiting
        (states 1, 5) and unexpired at ``now``, none above ``ceiling``; it stops before
        the first of them that is not yet due (delivery by position keeps order), and when
        fewer than ``limit`` are there, it passes every message up to the last one. The
        range (after, end] then reads the same rows whenever it is read (``stream_rows``
        at ``now``) until it is acknowledged. The end is ``after`` when there is nothing new.
        """

    def stream_rows(
        self,
        queue: str,
        after: int,
        upto: int,
        *,
        at: float,
        limit: int,
        select: Selection | None,
    ) -> list[Row]:
        """Up to ``limit`` messages of a position range: ids in (after, upto], by id, as
        rows of READ_COLUMNS.

        Those ``select`` holds for that were due and unexpired at ``at``: ready or
        waiting, or expired since (state 3 with ``expires_at`` after ``at``).
        """

    def stream_behind(
        self, queue: str, position: int | None, *, limit: int, select: Selection | None
    ) -> int:
        """How many ready messages of ``queue`` (at most ``limit``) a position stream must
        take by rounds: those with ids up to ``position`` (None: every one) that
        ``select`` holds for. A subscription's own rows (pulled by a consumer before), or
        in a queue messages that came back behind its position."""

    def scan(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> list[Row]:
        """Up to ``limit`` messages in ``state`` (as browse) with ids in (after, upto], by id,
        as rows of READ_COLUMNS."""

    def id_bounds(self, queue: str) -> tuple[int, int, int]:
        """The lowest and highest id of the queue's messages, and how many there are."""

    def drop_stream(self, queue: str, name: str) -> bool:
        """Forget a stream, giving back what it holds; False if there was none."""


class Sinks(Protocol):
    """What the Spark sink needs: staged messages published at once, once per batch."""

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


class JobsStatements(Protocol):
    """What jobs, tasks, profiles and schedules need (docs/jobs.md): jobs.sql's statements."""

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


class Topics(Protocol):
    """Topics and subscriptions (docs/topics.md; sluice.backends.topics explains how)."""

    def pull(
        self, subscription: str, selector: Selection | None, *, window: int, everything: bool
    ) -> int:
        """Take the topic's next messages into ``subscription`` (up to its window, or all)."""
        ...

    def backlog(self, subscription: str, selector: Selection | None) -> Backlog:
        """What ``subscription`` has yet to settle."""
        ...

    def collect(self, topic: str) -> int:
        """Delete a bounded range of ``topic``'s messages every subscription has passed."""
        ...

    def pass_unselected(self, subscription: str, selector: Selection | None) -> None:
        """Move a selective subscription's pointer past messages it will never receive."""
        ...

    def laggards(self) -> list[str]:
        """Selective subscriptions at their topic's lowest pointer."""
        ...

    def topics(self) -> list[str]:
        """Every topic's name."""
        ...

    def ended_subscriptions(self) -> list[str]:
        """Non-durable subscriptions whose session ended; durable ones unused too long."""
        ...

    def subscriptions_of(self, topic: str) -> list[str]:
        """The names of ``topic``'s subscriptions."""
        ...

    def subscription_info(self, topic: str | None) -> list[Row]:
        """Per subscription: name, topic, pointer, where, durable, expire_after, used_at."""
        ...


class RuleUnit(Protocol):
    """One database transaction of the rules engine."""

    def statement_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        """Run the named statement (rules.sql); its rows."""

    def statement_count(self, name: str, params: Mapping[str, Any]) -> int:
        """Run the named statement; how many rows it changed."""

    def template_rows(
        self, name: str, holes: Mapping[str, str], params: Mapping[str, Any]
    ) -> list[Row]:
        """Run the named template with its holes filled by compiled expressions."""

    def ids(self, values: Sequence[int]) -> Any:
        """A list of ids as this dialect binds it (the ``{rules_ids}`` fragment's ``ids``)."""

    def enqueue(self, session: int, tx: int, envelopes: Sequence[Envelope]) -> None:
        """Insert ready messages exactly as a queue transaction's commit would."""

    def exclusive(self, key: int) -> None:
        """From here to the unit's end, no other engine's unit holds ``key`` (a queue id,
        or a slicing's negative key): a lock where engines run concurrently (PostgreSQL);
        SQLite's writers are serial anyway."""

    def insert_selected(
        self,
        queues: Mapping[str, int],
        holes: Mapping[str, str],
        params: Mapping[str, Any],
        *,
        done: str,
    ) -> int:
        """Insert ready messages built by SQL (rules.sql's rules_insert, holes filled) into
        ``queues`` (names and ids), with the commit locks an enqueue takes, and settle the
        batch's triggers (``params['ids']``) as the statement ``done`` does (rules_done or
        rules_remove); how many messages it inserted."""

    def savepoint(self) -> AbstractContextManager[None]:
        """A part of the unit that a failure inside undoes alone (the error propagates)."""


class RuleStore(Protocol):
    """The rules engine's storage (sluice.rules; backends/rules.py, rules.sql)."""

    def rules_unit(self, work: Callable[[RuleUnit], T], *, durable: bool = True) -> T:
        """Run ``work`` in one database transaction: all of it happens, or none."""

    def rules_read(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        """Run one read-only named statement of rules.sql on its own."""

    def rules_write(self, name: str, params: Mapping[str, Any]) -> int:
        """Run one named statement of rules.sql as its own transaction."""

    def rules_compiler(
        self, relations: RelationSource | None, prefix: str = ..., alias: str = ...
    ) -> SqlCompiler:
        """A compiler of rule expressions over the message ``alias`` (the triggering one)."""

    def rules_object(self, pairs: Sequence[tuple[str, str, str]], *, strip: bool) -> str:
        """SQL of a JSON object from (key, value SQL, value type) (see backends/rules.py)."""

    def rules_inherited(self, name: str) -> str:
        """SQL of the triggering message's property ``name`` as a JSON value."""

    def rules_body(self, kind: str, sql: str) -> str | None:
        """The body columns of rules_insert for a body of ``kind``; None: Python builds it."""

    def rules_made(
        self,
        number: int,
        columns: str,
        *,
        ids: str,
        queue_id: str,
        max_size: str,
        kind: str,
    ) -> tuple[str, str]:
        """rules_insert's part and rows for one action (see backends/rules.py)."""

    def rules_relations(self, queue_ids: Mapping[str, int], slicing: str | None) -> RelationSource:
        """Where a rule's relations are: ``slicing`` the one its slice() reads."""


class KeyStore(Protocol):
    """API keys of the HTTP server (sluice.server.grants; backends/keys.py, keys.sql).

    A key is stored by the hash of its secret, never the secret; it keeps its row, and
    its name, when revoked.
    """

    def keys_add(self, name: str, digest: str, grants: str, *, admin: bool, now: float) -> None:
        """Store a new key: its name, the hash of its secret, its grants as JSON text.

        ConfigurationError (and nothing stored) if a key of that name exists, revoked
        or not.
        """

    def keys_list(self) -> list[StoredKey]:
        """Every key, revoked ones too, by name."""

    def keys_revoke(self, name: str, now: float) -> bool:
        """Revoke the key as of ``now``; False if there is no such key.

        Idempotent: a key revoked already stays revoked as of the first time.
        """

    def keys_find(self, digest: str) -> StoredKey | None:
        """The key whose secret hashes to ``digest``, or None if none does or it is revoked."""

    def keys_used(self, name: str, now: float) -> None:
        """Record that the key was used at ``now``; not durable (a lost mark is harmless)."""


class GatewayStore(Protocol):
    """Gateway queues (sluice.gateways; backends/gateways.py, gateways.sql): which
    transport serves a queue, in which direction, with which settings (JSON text)."""

    def gateways_put(
        self, queue: str, direction: str, transport: str, settings: str, now: float
    ) -> None:
        """Define the gateway of ``queue``, or replace its definition."""

    def gateways_list(self) -> list[StoredGateway]:
        """Every gateway, by queue name."""

    def gateways_drop(self, queue: str) -> bool:
        """Forget the gateway of ``queue`` (the queue stays); False if it had none."""


class IdempotencyStore(Protocol):
    """The answers of HTTP requests made with an Idempotency-Key (sluice.server
    .idempotency; backends/idempotency.py, idempotency.sql), per API key (``owner``).

    The statement ``idempotency_done`` is the effect (``Transaction.add_effect``, expect
    1) that stores a claimed request's answer in the transaction of its work;
    ``idempotency_record`` (expect ``count``) the one that writes unclaimed requests' keys
    whole with their answers (``keys``: a JSON array of [key, fingerprint, answer]).
    """

    def idempotency_claim(
        self, owner: str, key: str, fingerprint: str, now: float, *, durable: bool = True
    ) -> bool:
        """Record a first request with ``key`` as running; False if the key has a row.
        Not ``durable``: the work's own durable commit, later, makes it durable too."""

    def idempotency_find(self, owner: str, key: str) -> IdempotentRequest | None:
        """What is known of ``key``: its request's fingerprint and, once run, its answer."""

    def idempotency_restart(
        self,
        owner: str,
        key: str,
        fingerprint: str,
        *,
        now: float,
        stale: float,
        durable: bool = True,
    ) -> bool:
        """Run the same request again in place of one that started before ``stale`` and
        never answered (its server died); False if there is no such one."""

    def idempotency_answer(self, owner: str, key: str, status: int, answer: str) -> None:
        """Keep ``answer`` (JSON text) with ``status`` as the running request's answer."""

    def idempotency_forget(self, owner: str, key: str) -> None:
        """Drop a running request's row: it failed on the server's side; a retry runs."""

    def idempotency_expire(self, before: float) -> int:
        """Drop every key whose request started before ``before``; how many."""


class Outbox(Protocol):
    """Queue transactions inside the caller's own database transaction (PostgreSQL)."""

    def bind(self, connection: object) -> TxStore:
        """The message operations, run on ``connection`` inside its open transaction.

        ConfigurationError if ``connection`` is not one this backend can use.
        """
        ...


class Backend(
    MessageStore,
    Sessions,
    Catalog,
    ChangeFeed,
    Expressions,
    Streams,
    Sinks,
    JobsStatements,
    Topics,
    Retention,
    RuleStore,
    KeyStore,
    IdempotencyStore,
    GatewayStore,
    Protocol,
):
    """Queue storage: every capability above, plus its dialect and its optional outbox."""

    dialect: str
    clock: Clock
    """The time messages are judged by (enqueued, available, expired); the Database sets it.
    Session heartbeats and leases are not: they stay on real time."""
    outbox: Outbox | None
    """Queue transactions on a caller's connection, or None where the backend has none."""

    def close(self) -> None:
        """Release the connection(s). Idempotent."""
        ...
