"""Queue transactions: any number of enqueues and dequeues on any queues, all or nothing.

Enqueues are kept in the transaction until commit (nobody else can see them
anyway) and written with the commit in one database transaction. They reach
the database earlier only when the transaction itself reads a queue it wrote
to, because its own enqueues are visible to it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from enum import Enum
from types import TracebackType
from typing import TYPE_CHECKING, Any, Unpack

from sluice.backends.base import (
    CommitPlan,
    Effect,
    Envelope,
    Lane,
    MessageRow,
    StagedPart,
    TxStore,
    lane_of,
)
from sluice.catalog import QueueSpec
from sluice.engine import steps, topics
from sluice.engine.claim import check_blocks, check_release, freed_credit, take_steps
from sluice.engine.context import Stranded
from sluice.engine.enqueue import (
    EnqueueOptions,
    check_group,
    check_seconds,
    check_text,
    envelopes,
)
from sluice.engine.observe import Span, destination_of, settle_operation, settled
from sluice.engine.reading import BrowseState, browse, to_message
from sluice.engine.steps import Blocking, Call, Steps
from sluice.errors import (
    ConfigurationError,
    ConnectionLost,
    LeaseLost,
    MessageError,
    MessageStateError,
    SluiceError,
    TransactionClosed,
    TransactionError,
)
from sluice.message import (
    Body,
    Message,
    Position,
)

if TYPE_CHECKING:
    from sluice.engine.context import EngineContext

__all__ = ["BrowseState", "Transaction", "TxState"]

log = logging.getLogger("sluice")


class TxState(Enum):
    """Where a transaction is: open, or ended one way or the other."""

    ACTIVE = "active"
    COMMITTED = "committed"
    ABORTED = "aborted"


class Transaction:
    """A queue transaction; use as a context manager (commit on exit, abort on exception).

    A transaction is meant for one thread at a time. Its id is ``S/T``: the
    session and the transaction's number within it.
    """

    __slots__ = (
        "__weakref__",
        "_backend",
        "_buffer",
        "_buffered_queues",
        "_capped",
        "_context",
        "_count",
        "_durable",
        "_effects",
        "_held",
        "_held_lanes",
        "_kept",
        "_lanes_out",
        "_observed",
        "_pending",
        "_pending_queues",
        "_rejects",
        "_shared",
        "_touched",
        "_unheard",
        "_writer",
        "implicit",
        "number",
        "session",
        "state",
    )

    def __init__(
        self,
        context: EngineContext,
        *,
        implicit: bool = False,
        backend: TxStore | None = None,
        owner: tuple[int, int] | None = None,
    ) -> None:
        self._context = context
        self._backend: TxStore = backend or context.backend
        # owner: another session's (session, number), for work staged on its behalf (stage()).
        self.session, self.number = owner or context.next_transaction()
        self._writer = owner[0] if owner else context.writer
        self.implicit = implicit  # the one-message transaction behind Queue.get/put
        self.state = TxState.ACTIVE
        self._count = 0
        self._buffer: list[Envelope] = []
        self._buffered_queues: set[str] = set()
        self._pending = 0
        self._pending_queues: set[str] = set()
        self._held: dict[int, Message] = {}
        self._held_lanes: dict[int, Lane] = {}  # held messages that belong to a lane
        # Held messages whose queue keeps them when settled; made by the first of them.
        self._kept: set[int] | None = None
        self._lanes_out: set[Lane] = set()  # lanes this transaction enqueued to
        self._rejects: dict[int, str] = {}
        self._touched = False
        self._unheard: set[str] | None = None  # queues it may hold messages of unknowingly
        self._shared = False  # a part of a split: its number is its siblings' too
        self._durable = False
        self._effects: list[Effect] = []
        self._capped: set[str] | None = None  # queues with max_in_flight it took from
        self._observed: list[Span] | None = None  # telemetry's, ended with the transaction

    @property
    def id(self) -> str:
        return f"{self.session}/{self.number}"

    @property
    def next_message_id(self) -> str:
        """The id the next message this transaction enqueues will get."""
        return f"{self.session}/{self.number}/{self._count + 1}"

    @property
    def closed(self) -> bool:
        return self.state is not TxState.ACTIVE

    def __repr__(self) -> str:
        return f"<Transaction {self.id} {self.state.value}>"

    # --- enqueue ---------------------------------------------------------------------
    def enqueue(self, queue: str, body: Body, **options: Unpack[EnqueueOptions]) -> str:
        """Add a message to ``queue`` when this transaction commits; returns its id.

        Options as for ``enqueue_many``.
        """
        (message_id,) = self.enqueue_many(queue, [body], **options)
        return message_id

    def enqueue_many(
        self,
        queue: str,
        bodies: Iterable[Body],
        *,
        priority: int | None = None,
        properties: dict[str, Any] | None = None,
        delay: float = 0.0,
        ttl: float | None = None,
        content_type: str | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        type: str | None = None,
        group: str | None = None,
    ) -> list[str]:
        """Add several messages with the same options; returns their ids in order.

        ``priority``: higher first (default 0, or the queue's priority function
        for the message's type); ``properties``: a dict of JSON values;
        ``delay``: seconds until visible; ``ttl``: seconds until it expires;
        ``content_type``: recorded with the body (chosen from its type when
        None); ``correlation_id`` and ``reply_to``: free text for replies;
        ``type``: the message type the bodies must conform to (a Pydantic
        instance names its bound type itself; a queue that accepts one type
        needs no name); ``group``: messages of one group are taken in enqueue
        order and by one transaction at a time (docs/isolation.md). The options
        are checked once, so this is the fast way to enqueue a batch. If any
        body is refused, none of them is added.
        """
        self._check_active()
        content = self._context.content(queue)
        spec = content.spec
        if spec.kind == "subscription":
            topics.check_target(spec)
        lane = lane_of(spec.isolation, check_group(group), self._writer, self.number)
        first = self._count + 1
        span = None
        observer = self._context.observer
        if observer is not None:  # telemetry on: the ids are known before the bodies
            bodies = bodies if isinstance(bodies, list | tuple) else list(bodies)
            ids = [f"{self.session}/{self.number}/{n}" for n in range(first, first + len(bodies))]
            properties, span = observer.send(destination_of(spec), ids, properties)
        try:
            added = envelopes(
                self._context.types, content, queue, bodies, first=first, lane=lane,
                now=self._context.clock.now(), priority=priority, properties=properties,
                delay=delay, ttl=ttl, content_type=content_type, correlation_id=correlation_id,
                reply_to=reply_to, type=type, group=group,
            )  # fmt: skip
        except BaseException as exc:
            if span is not None:  # refused: nothing was sent
                span.end(exc)
            raise
        if span is not None:
            self._watch(span)
        self._count += len(added)
        if lane is not None:
            self._lanes_out.add((queue, lane))
        self._buffer.extend(added)
        self._buffered_queues.add(queue)
        self._durable = self._durable or spec.durability == "persistent"
        prefix = f"{self.session}/{self.number}/"
        return [f"{prefix}{n}" for n in range(first, self._count + 1)]

    def flush(self) -> None:
        """Write buffered enqueues to the database now, as pending; commit does it anyway.

        For long enqueue-only transactions, so that their buffer stays small.
        """
        self._check_active()
        self._flush()

    def flush_steps(self) -> Steps[None]:
        """``flush`` as steps (engine/steps.py)."""
        self._check_active()
        yield from self._flush_steps()

    def _flush(self) -> None:
        """Write buffered enqueues as pending, so this transaction's reads see them."""
        steps.run(self._flush_steps(), self._backend, self._context.wakeups)

    def _flush_steps(self) -> Steps[None]:
        if self._buffer:
            yield Call("append", (self.session, self.number, self._buffer),
                       {"ready": False, "durable": False})  # fmt: skip
            self._touched = True
            self._pending += len(self._buffer)
            self._pending_queues |= self._buffered_queues
            self._buffer = []
            self._buffered_queues = set()

    # --- dequeue ---------------------------------------------------------------------
    def dequeue(
        self,
        queue: str,
        *,
        limit: int = 1,
        wait: float = 0.0,
        where: str | None = None,
        order_by: Sequence[str] | None = None,
    ) -> list[Message]:
        """Take up to ``limit`` messages, waiting up to ``wait`` seconds for the first.

        ``where``: an expression (docs/expressions.md) a message must satisfy;
        ``order_by``: keys such as ``"body.total DESC"`` taken in that order,
        ahead of priority order, for this call only. Both run in the database.
        The messages are done when this transaction commits and return to
        their original place if it aborts. On a queue with ``max_in_flight`` it
        takes no more than the queue's credit leaves (docs/delivery.md), and
        ``wait`` waits for credit as for messages.
        """
        return steps.run(
            self.dequeue_steps(queue, limit=limit, wait=wait, where=where, order_by=order_by),
            self._backend,
            self._context.wakeups,
        )

    def dequeue_steps(
        self,
        queue: str,
        *,
        limit: int,
        wait: float,
        where: str | None,
        order_by: Sequence[str] | None,
        chain: bool = True,
    ) -> Steps[list[Message]]:
        """``dequeue`` as steps (engine/steps.py): run here, or awaited by sluice.aio.
        ``chain`` False: at most one message of each lane (``get_many``, whose messages
        are settled each on its own)."""
        self._check_active()
        observer = self._context.observer
        started = time.time_ns() if observer is not None else 0
        content = self._context.content(queue)
        spec = content.spec
        select = content.selection(where, order_by)
        if not isinstance(limit, int) or limit < 1:
            raise ConfigurationError(f"limit must be a positive integer, not {limit!r}")
        wait = check_seconds("wait", wait, allow_zero=True)
        for stranded in self._context.stranded_in(queue):  # before the messages behind them
            yield Call("abort", stranded.abort_args, {})
            self._context.finished(stranded)
        if queue in self._buffered_queues:
            yield from self._flush_steps()
        own = queue in self._pending_queues
        # Lanes this transaction holds messages of offer it their next message.
        lanes = sorted({lane for q, lane in self._held_lanes.values() if q == queue})
        deadline = time.monotonic() + wait
        try:
            rows = yield from take_steps(
                self._context, self._backend, spec, session=self.session, tx=self.number,
                limit=limit, wait=wait, deadline=deadline, own=own, select=select,
                lanes=lanes, chain=chain,
            )  # fmt: skip
        except ConnectionLost:
            # The claim may have committed unheard (PostgreSQL's backend then gives back
            # every claim of this transaction at its end, known or not): so it must end
            # in the database, even holding nothing it knows of, and an abort refused
            # must keep this queue's next take waiting. Else the messages stay held by
            # a live session while this process takes the ones behind them (the fault
            # campaign's gateway forwarded out of order so).
            self._touched = True
            self._unheard = (self._unheard or set()) | {queue}
            raise
        messages = self._hold(spec, rows)
        if observer is not None and messages:
            observer.received(destination_of(spec), messages, started)
        if len(messages) < len(rows):
            # Some were refused by their bound model and rejected (_hold): the ones behind
            # take their places, as if they had never been there; each round rejects one
            # or more, so this ends.
            left = 0.0 if messages else max(deadline - time.monotonic(), 0.0)
            messages += yield from self.dequeue_steps(
                queue, limit=len(rows) - len(messages), wait=left, where=where,
                order_by=order_by, chain=chain,
            )  # fmt: skip
        return messages

    def _hold(self, spec: QueueSpec, rows: list[MessageRow]) -> list[Message]:
        """The claimed rows as messages this transaction holds."""
        queue = spec.name
        if rows:
            self._touched = True
            self._durable = self._durable or spec.durability == "persistent"
            if spec.max_in_flight is not None:  # settling them frees credit waited for
                self._capped = (self._capped or set()) | {queue}
        messages = []
        models = self._context.types.models
        refused: list[tuple[Message, str]] = []
        for row in rows:
            m = to_message(queue, row, self, models, refused)
            if m.ref in self._held:
                # Recovery gave back what this transaction held (its session was taken
                # for dead) and it claimed the message anew: handed out twice, it would
                # be processed twice (the fault campaign's movers did so).
                raise LeaseLost(
                    f"transaction {self.id} lost message {m.id} to recovery (its session's "
                    "lease expired: the process stalled) and took it again; abort it and "
                    "begin anew"
                )
            messages.append(m)
            self._held[m.ref] = m
            if row.p_session == self.session and row.p_tx == self.number:  # its own enqueue
                self._pending -= 1  # (and it holds no lane: it never entered one)
            elif row.lane is not None:
                self._held_lanes[m.ref] = (queue, row.lane)
        if refused:
            # A body its bound model refuses cannot be handed out as that model: it is
            # rejected in this transaction (to the queue's error queue with why, when this
            # commits; back in its place if it aborts) and not handed out.
            for m, reason in refused:
                self._rejects[m.ref] = reason
                log.warning("sluice: message %s of %s rejected: %s", m.id, queue, reason)
            out = {m.ref for m, _ in refused}
            messages = [m for m in messages if m.ref not in out]
        if spec.retention is not None:
            # Judged when taken, by the settings this process sees (at most a second old).
            if self._kept is None:
                self._kept = set()
            self._kept.update(m.ref for m in messages)
        return messages

    def split(self, messages: list[Message]) -> list[Message]:
        """Hand each of ``messages``, taken by this take-only implicit transaction, to an
        implicit transaction of its own, so that each is settled alone (``get_many``):
        the same messages, each with its own holder.

        The parts keep this transaction's session and number: a settle names the rows it
        settles, so each touches only its own, and recovery, which gives back a session's
        claims, treats them all alike. What stays here (messages its bound model refused,
        rejected when this commits) is the caller's to commit. A lane's messages must
        not be split up (take them with ``chain=False``: one of each lane at most).
        """
        self._check_active()
        if not self.implicit or self._buffer or self._pending or self._effects:
            raise TransactionError("only a take-only implicit transaction can be split")
        parts = []
        for m in messages:
            self._check_held(m)
            part = Transaction(
                self._context, implicit=True, backend=self._backend,
                owner=(self.session, self.number),
            )  # fmt: skip
            part._touched, part._durable, part._capped = True, self._durable, self._capped
            part._shared = True
            del self._held[m.ref]
            m = m._replace(holder=part)  # noqa: PLW2901 (the same message, its new holder)
            part._held[m.ref] = m
            parts.append(m)
            lane = self._held_lanes.pop(m.ref, None)
            if lane is not None:
                part._held_lanes[m.ref] = lane
            if self._kept is not None and m.ref in self._kept:
                self._kept.discard(m.ref)
                part._kept = {m.ref}
        if not self._held:
            self.state = TxState.COMMITTED  # nothing left for it to do
        return parts

    def release(self, message: Message) -> None:
        """Give a taken message back now, to its original place (counts an attempt).

        Of a lane (a group, or a writer or block of an isolated queue), the
        messages taken last go back first: giving back one while holding a later
        one would let the later go first.
        """
        steps.run(self.release_steps(message), self._backend, self._context.wakeups)

    def release_steps(self, message: Message) -> Steps[None]:
        """``release`` as steps (engine/steps.py)."""
        self._check_held(message)
        lane = self._held_lanes.get(message.ref)
        check_release(message, lane, self._held_lanes)
        lanes = [lane] if lane is not None else []
        observer = self._context.observer
        span = None if observer is None else settled(observer, "release", [message], self._spec)
        try:
            yield Call("release", (self.session, self.number, [message.ref], lanes), {})
        except BaseException as exc:
            if span is not None:
                span.end(exc)
            raise
        if span is not None:
            span.end()
        del self._held[message.ref]
        self._held_lanes.pop(message.ref, None)
        self._rejects.pop(message.ref, None)
        if self._kept:
            self._kept.discard(message.ref)
        if message.producer == (self.session, self.number):
            self._pending += 1
        # Everyone: out of attempts, it went to an error queue instead.
        self._context.wakeups.notify()

    def reject(self, message: Message, reason: str) -> None:
        """Send a taken message to its queue's error queue with ``reason`` when this commits."""
        self._check_held(message)
        if not isinstance(reason, str) or not reason:
            raise MessageError("reject needs a reason: a non-empty str")
        # NUL and lone surrogates failed in the driver at commit (StorageError on
        # PostgreSQL, UnicodeEncodeError everywhere): refused now, on every backend.
        check_text("reason", reason)
        self._rejects[message.ref] = reason

    def browse(
        self,
        queue: str,
        *,
        limit: int = 100,
        state: BrowseState = "ready",
        where: str | None = None,
        order_by: Sequence[str] | None = None,
        after: Position | str | tuple[int, int] | None = None,
    ) -> list[Message]:
        """Look at a queue as this transaction sees it, without taking anything.

        ``after``: a message's ``position``, to page on from it.
        """
        return steps.run(
            self.browse_steps(queue, limit=limit, state=state, where=where, order_by=order_by,
                              after=after),
            self._backend,
            self._context.wakeups,
        )  # fmt: skip

    def browse_steps(
        self,
        queue: str,
        *,
        limit: int,
        state: BrowseState,
        where: str | None,
        order_by: Sequence[str] | None,
        after: Position | str | tuple[int, int] | None,
    ) -> Steps[list[Message]]:
        """``browse`` as steps (engine/steps.py); the reading itself is blocking work."""
        self._check_active()
        yield Blocking(lambda: self._context.spec(queue))
        if queue in self._buffered_queues:
            yield from self._flush_steps()
        found: list[Message] = yield Blocking(lambda: browse(
            self._context, queue, limit=limit, state=state, tx=(self.session, self.number),
            backend=self._backend,
            where=where, order_by=order_by, after=after,
        ))  # fmt: skip
        return found

    # --- ending ----------------------------------------------------------------------
    def commit(self) -> None:
        """Make every enqueue and dequeue of this transaction happen, at once and durably."""
        steps.run(self.commit_steps(), self._backend, self._context.wakeups)

    def commit_steps(self) -> Steps[None]:
        """``commit`` as steps (engine/steps.py)."""
        plan, freed = yield from self.plan_steps()
        if plan is not None:
            try:
                yield Call("commit", (plan,), {})
            except LeaseLost as exc:
                self.lost(exc)
                raise
        self.committed(freed)

    def plan_steps(self) -> Steps[tuple[CommitPlan | None, dict[str, int] | None]]:
        """What this transaction's commit writes (None: nothing) and the credit it frees;
        the caller commits the plan, then calls ``committed`` (or ``lost``)."""
        self._check_active()
        if self._held_lanes:
            yield from check_blocks(self._context, self.id, self._held_lanes, self._held)
        freed = freed_credit(self._capped, self._held) if self._capped else None
        plan: CommitPlan | None = None
        if self._held and self._context.observer is not None:
            operation = settle_operation(len(self._held), len(self._rejects))
            held = list(self._held.values())
            self._watch(settled(self._context.observer, operation, held, self._spec))
        if self._buffer or self._touched or self._effects:
            plan = CommitPlan(
                session=self.session,
                tx=self.number,
                enqueues=self._buffer,
                pending=self._pending,
                held=list(self._held),
                rejects=self._rejects,
                durable=self._durable,
                lanes=sorted(self._lanes_out | set(self._held_lanes.values())),
                effects=self._effects,
                freed=tuple(freed) if freed else (),
            )
            if self._kept:  # only queues with retention pay for it
                kept = self._kept
                plan.kept = [r for r in self._held if r in kept and r not in self._rejects]
                plan.settled_at = self._context.clock.now()
        return plan, freed

    def lost(self, error: LeaseLost) -> None:
        """Its plan's commit failed with ``error``: recovery has undone it."""
        self.state = TxState.ABORTED
        if self._observed is not None:
            self._end_observed(error)

    def committed(self, freed: dict[str, int] | None) -> None:
        """Its plan is committed: it is over, and those waiting for its news are told."""
        self.state = TxState.COMMITTED
        if self._observed is not None:
            self._end_observed(None)
        wakeups = self._context.wakeups
        if self._pending or self._rejects or self._held_lanes:
            # Which queues gained how many is not known here (a lane's next message
            # became its head, say).
            wakeups.notify()
        elif self._buffer:
            counts: dict[str, int] = {}
            for e in self._buffer:
                counts[e.queue] = counts.get(e.queue, 0) + 1
            for queue, count in counts.items():
                wakeups.notify(queue, count)
        if freed:  # credit for as many more
            for queue, count in freed.items():
                wakeups.notify(queue, count)

    def savepoint(self) -> tuple[int, int, int, int, frozenset[Lane]]:
        """A mark that ``rollback_to`` can undo this transaction's later enqueues to."""
        self._check_active()
        lanes = frozenset(self._lanes_out)
        return (len(self._buffer), len(self._effects), self._pending, len(self._held), lanes)

    def rollback_to(self, mark: tuple[int, int, int, int, frozenset[Lane]]) -> None:
        """Undo the enqueues and effects added since ``mark``; the transaction goes on.

        Only while they are still buffered and nothing was taken since: after a
        dequeue (or a flush) since the mark, TransactionError, and the
        transaction should be aborted. Ids handed out meanwhile are not reused.
        """
        self._check_active()
        buffered, effects, pending, held, lanes = mark
        if self._pending != pending or len(self._held) != held or len(self._buffer) < buffered:
            raise TransactionError(
                "this transaction took or flushed messages since the savepoint, so it cannot "
                "be rolled back to it; abort it instead"
            )
        del self._buffer[buffered:]
        del self._effects[effects:]
        self._lanes_out = set(lanes)
        self._buffered_queues = {e.queue for e in self._buffer}

    def add_effect(self, effect: Effect) -> None:
        """Have a named jobs statement commit with this transaction (sluice.jobs uses it).

        If the statement's expectation fails, the commit raises ``Conflict`` and
        changes nothing.
        """
        self._check_active()
        self._effects.append(effect)
        self._durable = True

    def stage(self) -> StagedPart:
        """End this transaction by leaving its enqueues pending, for another process to publish.

        Only for enqueue-only transactions of a staging session (the Spark sink's
        tasks): the driver publishes all tasks' parts at once with
        ``publish_staged``, or ends their sessions, which drops them.
        """
        self._check_active()
        if self._held or self._effects:
            raise ConfigurationError("a transaction that dequeued cannot be staged")
        self._flush()
        self.state = TxState.COMMITTED
        return StagedPart(self.session, self.number, self._pending, tuple(sorted(self._lanes_out)))

    def abort(self) -> None:
        """Undo everything: enqueues vanish, taken messages return to their places."""
        steps.run(self.abort_steps(), self._backend, self._context.wakeups)

    def abort_steps(self) -> Steps[None]:
        """``abort`` as steps (engine/steps.py)."""
        if self.state is TxState.ABORTED:
            return
        self._check_active()
        if self._observed is not None or (self._held and self._context.observer is not None):
            self._observe_abort()
        if self._touched and self._shared:
            # The backend's abort gives back all its number's claims, its siblings' too:
            # this one gives back its own message, by its row.
            if self._held:
                lanes = sorted(set(self._held_lanes.values()))
                yield Call("release", (self.session, self.number, list(self._held), lanes), {})
        elif self._touched:
            lanes = sorted(set(self._held_lanes.values()))
            try:
                yield Call("abort", (self.session, self.number, list(self._held), lanes), {})
            except SluiceError as exc:
                # The database refuses the write now (a full disk, a lost connection):
                # the connection finishes the abort before it takes from these queues
                # again and at each heartbeat (EngineContext.strand); recovery does, if
                # the process dies first. Raising instead would leave the messages held
                # while this process went on taking the ones behind them.
                queues = frozenset(m.queue for m in self._held.values()) | (self._unheard or set())
                self._context.strand(
                    Stranded(self.session, self.number, tuple(self._held), tuple(lanes), queues)
                )
                log.warning(
                    "sluice: transaction %s's abort is put off (%s); its messages stay held "
                    "until the database takes writes again", self.id, exc,
                )  # fmt: skip
        self.state = TxState.ABORTED
        if self._held:
            self._context.wakeups.notify()

    def __enter__(self) -> Transaction:
        self._check_active()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # A transaction the block already ended explicitly is left as it is.
        if self.state is not TxState.ACTIVE:
            return
        if exc_type is None:
            self.commit_or_abort()
        else:
            self.abort()

    def commit_or_abort(self) -> None:
        """Commit; if the commit fails (the database went away, say), abort what is left
        and raise its error, rather than leave the messages held until the session ends
        (the end of a ``with`` block does this)."""
        try:
            self.commit()
        except BaseException:
            if self.state is TxState.ACTIVE:
                self.abort()
            raise

    # --- telemetry (engine/observe.py) ------------------------------------------------
    def _watch(self, span: Span) -> None:
        if self._observed is None:
            self._observed = []
        self._observed.append(span)

    def _end_observed(self, error: BaseException | None) -> None:
        spans, self._observed = self._observed or [], None
        for span in spans:
            span.end(error)

    def _observe_abort(self) -> None:
        """What this transaction sent is not sent; what it held goes back (a release)."""
        self._end_observed(TransactionError(f"transaction {self.id} was aborted"))
        if self._held and (observer := self._context.observer) is not None:
            settled(observer, "release", list(self._held.values()), self._spec).end()

    def _spec(self, queue: str) -> QueueSpec:
        return self._context.spec(queue)

    # --- checks ----------------------------------------------------------------------
    def check_lease(self) -> None:
        """LeaseLost unless this transaction's session surely still holds its lease: for
        work outside the database on what it holds (a gateway's delivery), which must
        stop once another process may have taken the session for dead and handed its
        messages to someone else (the fault campaign found a sender whose heartbeats
        failed on a full disk delivering messages taken before, ahead of ones given back)."""
        self._check_active()
        if not self._context.lease_held(self.session):
            raise LeaseLost(
                f"transaction {self.id}'s session has not renewed its lease for longer than "
                "the lease: others may have rolled it back; abort it and begin anew"
            )

    def _check_active(self) -> None:
        if self.state is not TxState.ACTIVE:
            raise TransactionClosed(
                f"transaction {self.id} is {self.state.value}; begin a new one with db.begin()"
            )

    def _check_held(self, message: Message) -> None:
        self._check_active()
        if message.holder is not self or message.ref not in self._held:
            raise MessageStateError(
                f"message {message.id} is not held by transaction {self.id}; "
                "only messages this transaction dequeued and still holds can be settled by it"
            )
