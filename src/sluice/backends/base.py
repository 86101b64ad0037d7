"""The storage seam: what the engine needs of a backend, as small protocols mypy checks.

A backend is a ``MessageStore`` (the queue-level operations a transaction and a
queue handle use) plus the capabilities every backend has: ``Sessions``,
``Catalog``, ``ChangeFeed``, ``Streams`` and ``Sinks`` (Spark),
``JobsStatements``, ``Expressions``, ``Topics``, ``Retention``, ``RuleStore``,
``KeyStore``, ``IdempotencyStore`` and ``GatewayStore``. ``Backend``
joins them; each backend class names the protocols it implements, so mypy
checks it against each. The Spark pair (``Streams``, ``Sinks``) is written in
``base_spark`` and the rules engine's (``RuleStore``, ``RuleUnit``) in
``base_rules``; both are re-exported here, with the records that cross the seam.
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
from typing import Any, Protocol

from sluice.backends.base_rules import RuleStore, RuleUnit
from sluice.backends.base_spark import Sinks, Streams
from sluice.backends.records import (
    MESSAGE_COLUMNS,
    READ_COLUMNS,
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
    Reached,
    Row,
    Selection,
    SessionInfo,
    StagedPart,
    StoredGateway,
    StoredKey,
    StoredProperty,
    StoredSqsQueue,
    StreamState,
    lane_of,
)
from sluice.backends.topics import Backlog
from sluice.catalog import QueueSpec
from sluice.clock import Clock
from sluice.expr.sql import SqlCompiler

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
    "SqsStore",
    "StagedPart",
    "StoredGateway",
    "StoredKey",
    "StoredProperty",
    "StoredSqsQueue",
    "StreamState",
    "Streams",
    "Topics",
    "Turns",
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
        chain: bool = True,
    ) -> list[MessageRow]:
        """Claim up to ``limit`` available messages, highest priority first, FIFO within one.

        ``own`` includes the transaction's own pending enqueues. ``select`` keeps
        only the messages its condition holds for, and orders by its keys first.
        Of a lane only its head is claimable; ``lanes``, those the transaction
        holds messages of, offer their next message too. When ``limit`` asks for
        more, the lanes taken in this call offer theirs as well, unless ``chain`` is
        False (at most one message of each lane: the claim of several messages that
        are settled each on its own, ``Database.get_many``). ``fill`` False:
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

    def commit_many(self, plans: Sequence[CommitPlan]) -> list[BaseException | None]:
        """Commit several transactions' plans, each all or nothing, with one durable
        commit where the backend can: per plan, None or the error it failed with (the
        others still commit). Raises only if the database failed them all."""

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
        or its ``done`` ones settled before it, or (``ready``, whatever ``before``) every
        one not yet delivered: ready, delayed or waiting in a lane, never a claimed or
        pending one; atomically, in one database transaction. Returns how many went."""

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

    def recover(self, is_dead: Callable[[SessionInfo], bool], *, wait: bool = True) -> list[int]:
        """Roll back every session ``is_dead`` condemns, and expire overdue messages.

        Runs in one database transaction, so each dead session is rolled back
        exactly once however many nodes try at the same time. Returns the ids.
        ``wait``: while another pass runs, wait for it and then look; else leave the
        work to it and return none (a backend whose passes take turns anyway, as
        SQLite's write lock makes them, always waits).
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


class Turns(Protocol):
    """Several calls of one thread as one turn at the storage."""

    def one_turn(self) -> AbstractContextManager[Any]:
        """Inside it, this thread's calls run back to back: SQLite holds its one connection
        (and its lock, reentrant) across them instead of taking it for each, so threads
        that share a Database take turns once per block, not once per call. Nothing on
        PostgreSQL, whose calls take a connection of the pool each. Keep it short: no
        waiting inside."""


class Expressions(Protocol):
    """Compiling sluice expressions into this backend's SQL (declared properties)."""

    def expression_compiler(self) -> SqlCompiler:
        """A compiler of expressions for this backend's SQL, reading the message row as ``m``."""
        ...


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

    def pull_claim(
        self,
        subscription: str,
        selector: Selection | None,
        *,
        window: int,
        session: int,
        tx: int,
        limit: int,
    ) -> tuple[int, list[MessageRow]] | None:
        """``pull`` (not everything), then a plain ``claim`` of up to ``limit`` (no own
        enqueues, selection, lanes held or credit) in one go, where the backend can do so
        more cheaply than the two apart: (what ``pull`` answers, the claimed rows). None:
        nothing was done, and the caller pulls and claims itself."""
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


class KeyStore(Protocol):
    """API keys of the HTTP server (sluice.server.grants; backends/keys.py, keys.sql).

    A key is stored by the hash of its secret, never the secret; it keeps its row, and
    its name, when revoked.
    """

    def keys_add(
        self,
        name: str,
        digest: str,
        grants: str,
        *,
        admin: bool,
        now: float,
        signing: str | None = None,
    ) -> None:
        """Store a new key: its name, the hash of its secret, its grants as JSON text and
        ``signing``, its secret encrypted under the server's signing key (None: none).

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

    def keys_signing(self, name: str) -> tuple[StoredKey, str | None] | None:
        """The unrevoked key named ``name`` and its encrypted signing secret (None: it has
        none yet), or None if there is no such key or it is revoked."""

    def keys_set_signing(self, name: str, digest: str, signing: str) -> bool:
        """Give the key named ``name`` whose secret hashes to ``digest`` its encrypted
        signing secret; False if there is no such key. Idempotent."""


class SqsStore(Protocol):
    """What the SQS endpoint keeps of a queue beyond sluice's catalog (sluice.server.sqs;
    backends/sqs.py, sqs.sql): its SQS attributes and tags, as JSON text."""

    def sqs_queue_find(self, name: str) -> StoredSqsQueue | None:
        """The SQS record of queue ``name``, or None if it has none."""

    def sqs_queue_put(self, name: str, attributes: str, tags: str, now: float) -> None:
        """Write the SQS record of ``name`` (its creation time kept if it had one)."""

    def sqs_queue_add(self, name: str, attributes: str, tags: str, now: float) -> bool:
        """Write the SQS record of ``name`` unless it has one; True if this wrote it."""

    def sqs_dedup_find(self, queue: str, dedup: str, since: float) -> str | None:
        """The answer (JSON text) kept for deduplication id ``dedup`` of ``queue`` since
        ``since``, or None."""


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
    Turns,
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
    SqsStore,
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
