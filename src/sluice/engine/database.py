"""The queue engine's public face: catalog, transactions and sessions over one context.

``Engine`` is what the features above the engine (jobs, Spark) are given;
``sluice.Database`` adds those features to it. Everything here works through
the ``EngineContext`` that transactions and queue handles share.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

from sluice.backends.base import SLOTS, Backend, Selection
from sluice.catalog import (
    DEFAULT_MAX_SIZE,
    Durability,
    Isolation,
    QueueSpec,
    check_name,
    check_queue_name,
)
from sluice.clock import Clock
from sluice.engine import topics
from sluice.engine.acks import ack_many
from sluice.engine.any_queue import get_any, get_many
from sluice.engine.content import free_slot
from sluice.engine.context import DEFAULT_LEASE, DEFAULT_POLL_INTERVAL, EngineContext
from sluice.engine.credit import check_max_in_flight
from sluice.engine.observe import Observer
from sluice.engine.overview import QueueOverview, overview
from sluice.engine.queue import Queue
from sluice.engine.topics import Start, Subscription
from sluice.engine.transaction import Transaction
from sluice.engine.types import definition_of
from sluice.errors import ConfigurationError, QueueExists, QueueNotFound, SluiceError
from sluice.message import Message

__all__ = ["DEFAULT_LEASE", "DEFAULT_POLL_INTERVAL", "Engine"]

_UNSET: Any = object()


class Engine:
    """A connection to sluice queues. Thread-safe; close it (or use ``with``) when done."""

    def __init__(
        self,
        backend: Backend,
        *,
        lease: float = DEFAULT_LEASE,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        max_message_size: int = DEFAULT_MAX_SIZE,
        clock: Clock | None = None,
    ) -> None:
        if clock is not None:
            backend.clock = clock
        self.context = EngineContext(
            backend, lease=lease, poll_interval=poll_interval, max_message_size=max_message_size
        )

    @property
    def backend(self) -> Backend:
        """The storage backend the queues live in."""
        return self.context.backend

    @property
    def lease(self) -> float:
        """Seconds this session may go without heartbeat before others roll it back."""
        return self.context.lease

    @property
    def max_message_size(self) -> int:
        """The default largest body, in bytes, of queues created without ``max_size``."""
        return self.context.max_message_size

    @property
    def clock(self) -> Clock:
        """The time messages and jobs are judged by (``sluice.clock``); settable, for tests.

        By default the wall clock (on PostgreSQL the server's). Leases stay on real time.
        """
        return self.context.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.context.clock = clock

    @property
    def session(self) -> int:
        """This connection's session id (the S of message ids)."""
        return self.context.session

    @property
    def observer(self) -> Observer | None:
        """Telemetry's observer of this connection's messaging (engine/observe.py); None,
        the default, is telemetry off. ``sluice.contrib.otel.instrument`` sets one."""
        return self.context.observer

    @observer.setter
    def observer(self, observer: Observer | None) -> None:
        self.context.observer = observer

    # --- transactions ----------------------------------------------------------------
    def begin(self, *, connection: object | None = None) -> Transaction:
        """Start a queue transaction; end it with commit() or abort().

        ``connection`` (PostgreSQL only): a psycopg connection whose current
        transaction the queue transaction joins, so that its enqueues and
        dequeues commit, or roll back, with the caller's own statements.
        """
        if connection is None:
            return Transaction(self.context)
        outbox = self.backend.outbox
        if outbox is None:
            raise ConfigurationError(
                "transaction(connection=...) needs the PostgreSQL backend, "
                f"not {self.backend.dialect}"
            )
        return Transaction(self.context, backend=outbox.bind(connection))

    def transaction(self, *, connection: object | None = None) -> Transaction:
        """A transaction for ``with``: commits on exit, aborts on an exception.

        With ``connection`` the commit is the caller's (see ``begin``).
        """
        return self.begin(connection=connection)

    # --- catalog ---------------------------------------------------------------------
    def create_queue(
        self,
        name: str,
        *,
        max_attempts: int | None = None,
        error_queue: str | None = None,
        durability: Durability = "persistent",
        max_size: int | None = None,
        types: Sequence[str] = (),
        priority: Mapping[str, str] | None = None,
        isolation: Isolation = "none",
        priority_levels: int | None = None,
        max_in_flight: int | None = None,
        retention: float | str | None = None,
        exist_ok: bool = False,
    ) -> Queue:
        """Create a queue (and its error queue, if that does not exist yet).

        ``types``: the message types it accepts (default: any message);
        ``priority``: per message type (``"*"``: any other), an expression that
        gives a message enqueued without a priority its priority;
        ``isolation``: ``none``, ``ordered``, ``blockwise`` or
        ``ordered_blockwise``, how concurrent readers are kept apart
        (docs/isolation.md); ``priority_levels``: map producers' priorities onto
        this many levels (1-10, as Qpid maps JMS 0-9), FIFO within a level;
        ``max_in_flight``: the most messages its consumers hold unsettled at once;
        ``retention``: seconds (or ``"forever"``) settled messages are kept as
        ``done`` instead of deleted (docs/retention.md).
        """
        spec = QueueSpec(
            name,
            max_attempts=max_attempts,
            error_queue=error_queue,
            durability=durability,
            max_size=self.max_message_size if max_size is None else max_size,
            types=_names(types),
            priority=_priority_functions(priority or {}),
            isolation=isolation,
            priority_levels=priority_levels,
            max_in_flight=max_in_flight,
            retention=_retention(retention),
        )
        return self._create(spec, exist_ok=exist_ok)

    def _create(
        self,
        spec: QueueSpec,
        *,
        exist_ok: bool,
        pointer: int | None = None,
        owner: int | None = None,
    ) -> Queue:
        self._check_types(spec)
        self._check_error_queue(spec)
        if spec.error_queue is not None and self.backend.get_queue(spec.error_queue) is None:
            self.create_queue(spec.error_queue, durability=spec.durability, exist_ok=True)
        try:
            self.backend.create_queue(spec, pointer=pointer, owner_session=owner)
        except QueueExists:
            existing = self.backend.get_queue(spec.name)
            if (
                not exist_ok
                or existing is None
                or (existing.kind, existing.topic)
                != (
                    spec.kind,
                    spec.topic,
                )
            ):
                if existing is not None and existing.kind != spec.kind:
                    raise QueueExists(
                        f"{spec.name!r} exists already as a {existing.kind}"
                    ) from None
                raise
        return Queue(self.context, spec.name)

    def _check_error_queue(self, spec: QueueSpec) -> None:
        if spec.error_queue is None:
            return
        target = self.backend.get_queue(spec.error_queue)
        if target is not None and target.kind != "queue":
            raise ConfigurationError(
                f"error queue {spec.error_queue!r} is a {target.kind}: "
                "an error queue must be a plain queue"
            )

    # --- topics and subscriptions (docs/topics.md) ------------------------------------
    def create_topic(
        self,
        name: str,
        *,
        durability: Durability = "persistent",
        max_size: int | None = None,
        types: Sequence[str] = (),
        priority: Mapping[str, str] | None = None,
        priority_levels: int | None = None,
        retention: float | str | None = None,
        exist_ok: bool = False,
    ) -> Queue:
        """Create a topic: each message put into it goes to every one of its subscriptions.

        Stored once, it stays until every subscription has taken or passed it, and,
        with ``retention`` (seconds or ``"forever"``), until it is that old, so a
        subscription made later may start from it. Other settings as for queues.
        """
        spec = QueueSpec(
            name,
            durability=durability,
            max_size=self.max_message_size if max_size is None else max_size,
            types=_names(types),
            priority=_priority_functions(priority or {}),
            kind="topic",
            priority_levels=priority_levels,
            retention=_retention(retention),
        )
        return self._create(spec, exist_ok=exist_ok)

    def subscribe(
        self,
        topic: str,
        name: str,
        *,
        where: str | None = None,
        durable: bool = True,
        start: Start = "new",
        expire_after: float | None = None,
        window: int | None = None,
        max_attempts: int | None = None,
        error_queue: str | None = None,
        max_in_flight: int | None = None,
        retention: float | str | None = None,
        durability: Durability | None = None,
        exist_ok: bool = False,
    ) -> Queue:
        """Subscribe ``name`` to ``topic``; consume it as the queue ``name``.

        ``where``: the messages it receives (an expression over the message, run in
        the database); ``start``: ``"new"`` (messages published from now on),
        ``"first"`` (every message the topic still stores) or a message's
        ``position``; ``durable`` False: it ends with this connection's session;
        ``expire_after``: seconds without a consumer before it is dropped;
        ``window``: ready messages it takes from the topic ahead of its consumers
        (default 1000); ``durability``: of its settles (default: the topic's);
        ``"transient"`` acknowledges without waiting for the disk, so a power cut may
        deliver a message again, never lose one (as a broker's unsynced acks). The
        rest as for queues.
        """
        try:
            found = self.context.spec(topic, fresh=True)
        except QueueNotFound:
            raise self.context.not_found(topic, "topic") from None
        if found.kind != "topic":
            raise ConfigurationError(
                f"{topic!r} is a {found.kind}, not a topic: create it with db.create_topic"
            )
        if not isinstance(durable, bool):
            raise ConfigurationError(f"durable must be True or False, not {durable!r}")
        if where is not None and not isinstance(where, str):
            raise ConfigurationError(f"where must be an expression string, not {where!r}")
        where = where.strip() or None if where is not None else None  # "" receives everything
        spec = QueueSpec(
            name,
            max_attempts=max_attempts,
            error_queue=error_queue,
            durability=found.durability if durability is None else durability,
            max_size=found.max_size,
            types=found.types,
            kind="subscription",
            topic=topic,
            selector=where,
            durable=durable,
            expire_after=expire_after,
            window=window,
            priority_levels=found.priority_levels,
            max_in_flight=max_in_flight,
            retention=_retention(retention),
        )
        topics.selector(self.context, spec)  # ExpressionError, and nothing made
        owner = None if durable else self.session
        return self._create(
            spec, exist_ok=exist_ok, pointer=topics.start_pointer(start), owner=owner
        )

    def unsubscribe(self, name: str) -> None:
        """End a subscription: it and the messages it has not settled are gone."""
        spec = self.context.spec(name, fresh=True)
        if spec.kind != "subscription":
            raise ConfigurationError(f"{name!r} is a {spec.kind}, not a subscription")
        self.drop_queue(name)

    def subscriptions(self, topic: str | None = None) -> list[Subscription]:
        """Every subscription (of ``topic``), with how far behind it is."""
        if topic is not None and self.context.spec(topic).kind != "topic":
            raise ConfigurationError(f"{topic!r} is not a topic")
        found = []
        for (
            name,
            of,
            position,
            where,
            durable,
            expire_after,
            used_at,
        ) in self.backend.subscription_info(topic):
            try:
                spec = self.context.spec(name)
                backlog = self.backend.backlog(name, topics.selector(self.context, spec))
            except QueueNotFound:
                continue  # unsubscribed meanwhile
            oldest = min(
                (t for t in (backlog.held_since, backlog.unpulled_since) if t is not None),
                default=None,
            )
            found.append(
                Subscription(
                    name, of, where, bool(durable), expire_after, position, backlog.held,
                    backlog.unpulled, oldest, used_at, backlog.unpulled_delayed,
                )
            )  # fmt: skip
        return found

    def overview(self) -> list[QueueOverview]:
        """Every queue, topic and subscription with its counts, oldest ready message, lag
        and error queue: what ``sluice queues`` and the console show (engine/overview.py)."""
        specs = self.queues()
        subs = self.subscriptions() if any(s.kind == "subscription" for s in specs) else []
        return overview(specs, self.backend.stats_all(), subs)

    def queue(self, name: str, *, max_in_flight: int | None = None) -> Queue:
        """A handle on an existing queue; QueueNotFound if there is none.

        ``max_in_flight``: this handle's own credit, a consumer's cap on the messages
        it holds unsettled (its ``get`` takes no more until one is settled), on top
        of the queue's own ``max_in_flight`` over all consumers (docs/delivery.md).
        """
        if max_in_flight is not None:
            check_max_in_flight(max_in_flight)
        self.context.spec(name)
        return Queue(self.context, name, max_in_flight=max_in_flight)

    def get_any(
        self,
        queues: Sequence[str],
        *,
        wait: float = 0.0,
        until: threading.Event | None = None,
    ) -> Message | None:
        """Take the next message of the first of ``queues`` (in the order given) that
        has one, waiting up to ``wait`` seconds for news of any of them; None if none
        came. Settle it as one from ``Queue.get``; ``message.queue`` says which it is.

        ``until``: an event that ends the wait early when set (by another thread: a
        consumer whose own state changed, and which must look at other queues now);
        news for the queues sets it too, so clear it before you decide what to wait on.
        """
        return get_any(self.context, queues, wait, until)

    def get_many(
        self,
        queues: Sequence[str],
        *,
        limit: int,
        wait: float = 0.0,
        until: threading.Event | None = None,
    ) -> list[Message]:
        """Take up to ``limit`` messages, from the first of ``queues`` that has some,
        then the next, waiting as ``get_any`` for the first; [] if none came. Each is
        held on its own and settled as one from ``Queue.get`` (``ack``, ``release``,
        ``reject``, or ``ack_many``). A plain queue's are claimed in one statement, at
        most one of each group; an isolated queue's or a subscription's one at a time.
        """
        return get_many(self.context, queues, wait, until, limit=limit)

    def ack_many(self, messages: Sequence[Message]) -> list[SluiceError | None]:
        """Acknowledge messages taken by ``get``, ``get_any`` or ``get_many`` in one
        database commit (one disk flush), each still all or nothing on its own: per
        message None, or the error it met (``LeaseLost``: it will be delivered again).
        """
        return ack_many(self.context, messages)

    def queues(self) -> list[QueueSpec]:
        """The settings of every queue, by name."""
        return self.backend.list_queues()

    def alter_queue(
        self,
        name: str,
        *,
        max_attempts: int | None = _UNSET,
        error_queue: str | None = _UNSET,
        durability: Durability = _UNSET,
        max_size: int = _UNSET,
        types: Sequence[str] = _UNSET,
        priority: Mapping[str, str] = _UNSET,
        isolation: Isolation = _UNSET,
        priority_levels: int | None = _UNSET,
        max_in_flight: int | None = _UNSET,
        retention: float | str | None = _UNSET,
        expire_after: float | None = _UNSET,
        window: int | None = _UNSET,
    ) -> QueueSpec:
        """Change a queue's (topic's, subscription's) settings; those left out stay.

        The isolation level changes only while the queue holds no live
        messages (QueueInUse otherwise); other processes see the change within
        a second, as with every setting.
        """
        current = self.context.spec(name, fresh=True)
        changes: dict[str, Any] = {
            key: value
            for key, value in (
                ("max_attempts", max_attempts),
                ("error_queue", error_queue),
                ("durability", durability),
                ("max_size", max_size),
                ("types", _UNSET if types is _UNSET else _names(types)),
                ("priority", _UNSET if priority is _UNSET else _priority_functions(priority)),
                ("isolation", isolation),
                ("priority_levels", priority_levels),
                ("max_in_flight", max_in_flight),
                ("retention", _UNSET if retention is _UNSET else _retention(retention)),
                ("expire_after", expire_after),
                ("window", window),
            )
            if value is not _UNSET
        }
        spec = replace(current, **changes)
        self._check_types(spec)
        self._check_error_queue(spec)
        if spec.error_queue is not None and self.backend.get_queue(spec.error_queue) is None:
            self.create_queue(spec.error_queue, durability=spec.durability, exist_ok=True)
        self.backend.alter_queue(spec)
        self.context.forget(name)
        return spec

    # --- content: message types and declared properties ------------------------------
    def create_type(
        self,
        name: str | None = None,
        *,
        schema: dict[str, Any] | None = None,
        model: type | None = None,
        jpmq: str | None = None,
        xml_schema: str | None = None,
    ) -> str:
        """Define a message type; returns its name.

        Exactly one of: ``schema`` (a JSON Schema dict), ``model`` (a Pydantic
        model class, which is also bound: bodies of this type come back as its
        instances), ``jpmq`` (JPMQ's type definition language; its
        MESSAGETYPE names the type) or ``xml_schema`` (XML Schema text, for XML
        bodies). ``name`` may be left out when the definition names itself.
        """
        own_name, kind, definition = definition_of(
            schema=schema, model=model, jpmq=jpmq, xml_schema=xml_schema
        )
        type_name = check_name(name or own_name or "", "message type")
        self.backend.create_type(type_name, kind, definition)
        if model is not None:
            self.context.types.bind(type_name, model)
        return type_name

    def bind_model(self, model: type, name: str | None = None) -> None:
        """Have bodies of type ``name`` (default: the class's name) come back as ``model``.

        Binding is per process: a consumer binds the classes it wants to receive.
        """
        type_name = name or model.__name__
        if self.context.types.get(type_name) is None:
            raise ConfigurationError(f"message type {type_name!r} is not defined")
        self.context.types.bind(type_name, model)

    def message_types(self) -> dict[str, Any]:
        """Every message type's definition: a JSON Schema dict, or XML Schema text."""
        return {name: self.context.types.get(name).schema for name in self.backend.message_types()}  # type: ignore[union-attr]

    def create_property(
        self,
        name: str,
        expression: str,
        *,
        queues: Sequence[str],
        type: str | None = None,
        indexed: bool = True,
    ) -> None:
        """Declare a property: computed at enqueue, stored and indexed on ``queues``.

        Selections may then name it (``customer = 'Smith'``); a selection that
        spells out its expression uses the stored value as well. ``type`` is
        text, number or boolean; a bare JSON path is text unless told otherwise.
        Messages already in the queues get their value now. ``indexed=False``
        stores it without an index of its own (for values only ordered by an index
        that covers them, as task queues' are).
        """
        from sluice.expr import parse  # noqa: PLC0415  (sqlglot loads when content is used)

        check_name(name, "property")
        if isinstance(queues, str) or not queues:
            raise ConfigurationError("queues= takes a list of queue names")
        node = parse(expression)
        kind = type or (node.type if node.type in ("text", "number", "boolean") else "text")
        if kind not in ("text", "number", "boolean"):
            raise ConfigurationError(f"type must be text, number or boolean, not {kind!r}")
        node = parse(expression, want=kind)  # type: ignore[arg-type]
        fills = {}
        for queue in _with_subscriptions(self.context, queues):
            self.context.spec(queue, fresh=True)
            taken = [p.slot for p in self.backend.queue_properties(queue)]
            slot = free_slot(kind, taken, queue)  # type: ignore[arg-type]
            assert slot in SLOTS
            fills[queue] = (slot, *self._compile_value(node))
            self.context.forget(queue)
        self.backend.create_property(name, expression, kind, fills, indexed=indexed)

    def _compile_value(self, node: Any) -> tuple[str, dict[str, Any]]:
        sql = self.backend.expression_compiler()
        text = sql.compile(node)
        if node.type == "boolean":  # stored as a number: 1 or 0
            text = f"(CASE WHEN {text} THEN 1 WHEN NOT {text} THEN 0 END)"
        return text, sql.params

    def _check_types(self, spec: QueueSpec) -> None:
        missing = [t for t in spec.types if self.context.types.get(t) is None]
        missing += [t for t, _ in spec.priority if t != "*" and self.context.types.get(t) is None]
        if missing:
            raise ConfigurationError(
                f"message type {', '.join(map(repr, sorted(set(missing))))} is not defined; "
                "define it with db.create_type first"
            )

    def selection(
        self, queue: str, where: str | None, order_by: Sequence[str] | None = None
    ) -> Selection | None:
        """The checked selection of ``where``/``order_by`` on ``queue`` (None: everything).

        ExpressionError if the text does not parse or reaches outside the message.
        """
        return self.context.content(queue).selection(where, order_by)

    def drop_queue(self, name: str) -> None:
        """Remove a queue and every message in it.

        Refused (QueueInUse) while it is another queue's error queue or open
        transactions hold or enqueue its messages; dead sessions are rolled back first.
        """
        check_queue_name(name)
        self.recover()
        self.backend.drop_queue(name)
        self.context.forget(name)

    # --- sessions --------------------------------------------------------------------
    def recover(self) -> list[int]:
        """Roll back sessions whose owners died; returns their ids. Runs by itself too."""
        return self.context.recover()

    def close(self) -> None:
        """End the session: whatever it still holds is rolled back. Idempotent."""
        self.context.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _with_subscriptions(context: EngineContext, queues: Sequence[str]) -> list[str]:
    """``queues`` with each topic's subscriptions, which read its properties' slots.

    A property is declared on a topic, never on one of its subscriptions alone.
    """
    found = []
    for queue in queues:
        spec = context.spec(queue, fresh=True)
        if spec.kind == "subscription":
            raise ConfigurationError(
                f"{queue!r} is a subscription: declare properties on its topic {spec.topic!r}"
            )
        found.append(queue)
        if spec.kind == "topic":
            found += context.backend.subscriptions_of(queue)
    return found


def _retention(retention: float | str | None) -> float | None:
    """``retention`` in seconds: a number, ``"forever"`` (infinity) or None (not kept)."""
    if retention == "forever":
        return float("inf")
    if isinstance(retention, str):
        raise ConfigurationError(f"retention must be seconds, 'forever' or None, not {retention!r}")
    return retention


def _names(types: Sequence[str]) -> tuple[str, ...]:
    if isinstance(types, str):
        raise ConfigurationError("types= takes a list of message type names")
    return tuple(types)


def _priority_functions(priority: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    if not isinstance(priority, Mapping):
        raise ConfigurationError(
            "priority= takes a mapping of message type to expression, e.g. {'*': 'body.urgency'}"
        )
    return tuple(priority.items())
