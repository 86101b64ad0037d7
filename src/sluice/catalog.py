"""Queue definitions: what the catalog in the database records for each queue."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sluice.errors import ConfigurationError

__all__ = [
    "ANY_TYPE",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_WINDOW",
    "FOREVER",
    "ISOLATION_LEVELS",
    "KINDS",
    "MAX_PRIORITY_LEVELS",
    "Durability",
    "Isolation",
    "Kind",
    "QueueSpec",
    "check_name",
    "check_queue_name",
    "priority_level",
    "spec_from_row",
    "spec_params",
]

Durability = Literal["persistent", "transient"]

Isolation = Literal["none", "ordered", "blockwise", "ordered_blockwise"]
ISOLATION_LEVELS: tuple[str, ...] = ("none", "ordered", "blockwise", "ordered_blockwise")

Kind = Literal["queue", "topic", "subscription"]
KINDS: tuple[str, ...] = ("queue", "topic", "subscription")

MAX_PRIORITY_LEVELS = 10
"""AMQP 0-10 and JMS allow at most ten priority levels (0-9)."""

DEFAULT_WINDOW = 1000
"""How many ready messages a subscription takes from its topic ahead of its consumers."""

FOREVER = float("inf")
"""``retention=FOREVER`` (or ``"forever"``): settled messages are kept until purged."""

DEFAULT_MAX_SIZE = 1024 * 1024
"""Largest body a queue accepts unless told otherwise: 1 MiB."""

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,199}$")


ANY_TYPE = "*"
"""In a queue's priority functions: the one for messages no other entry names."""


def check_queue_name(name: str) -> str:
    """Queue names travel in URLs, file names and CLI arguments: keep them plain."""
    return check_name(name, "queue")


def check_name(name: str, what: str) -> str:
    """Names of queues, message types and properties follow the same plain rule."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"invalid {what} name {name!r}: use 1-200 letters, digits and _ . : - "
            "(not starting with . : or -)"
        )
    return name


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """A queue's settings.

    ``max_attempts``: deliveries that may end without acknowledgement before the
    message goes to ``error_queue`` (or is kept as failed); None means unlimited.
    ``durability``: ``persistent`` queues are durable at commit; ``transient``
    ones survive a process crash but not a power loss (no fsync at commit).
    ``max_size``: the largest body in bytes.
    ``types``: the message types the queue accepts (empty: any message).
    ``priority``: per message type (or ``"*"`` for the rest), an expression
    giving the priority of a message enqueued without one.
    ``isolation``: how concurrent readers are isolated from each other's
    writers and blocks (docs/isolation.md).
    ``kind``: a plain ``queue``, a ``topic`` (each of its subscriptions receives every
    message put into it) or a ``subscription`` of ``topic`` (docs/topics.md), which
    receives the topic's messages its ``selector`` holds for; ``durable`` False: it
    ends with the session that made it; ``expire_after``: seconds unused before it is
    dropped (None: never); ``window``: ready messages it takes ahead of consumers.
    ``priority_levels``: producers' priorities map onto this many levels (1-10), as
    Qpid maps JMS's 0-9; None keeps them as given.
    ``max_in_flight``: the most messages its consumers may hold unsettled at once.
    ``retention``: seconds a settled message is kept (``FOREVER``: until purged) as
    ``done``; None deletes it when settled.
    ``paused``: consumers take nothing from it (``Queue.pause``/``resume`` set it, never
    ``alter_queue``); what it holds may still be enqueued to and browsed.
    """

    name: str
    max_attempts: int | None = None
    error_queue: str | None = None
    durability: Durability = "persistent"
    max_size: int = DEFAULT_MAX_SIZE
    types: tuple[str, ...] = ()
    priority: tuple[tuple[str, str], ...] = ()
    isolation: Isolation = "none"
    kind: Kind = "queue"
    topic: str | None = None
    selector: str | None = None
    durable: bool = True
    expire_after: float | None = None
    window: int | None = None
    priority_levels: int | None = None
    max_in_flight: int | None = None
    retention: float | None = None
    paused: bool = False

    def __post_init__(self) -> None:
        check_queue_name(self.name)
        if not isinstance(self.paused, bool):
            raise ConfigurationError(f"paused must be True or False, not {self.paused!r}")
        self._check_topics()
        self._check_limits()
        if self.error_queue is not None:
            check_queue_name(self.error_queue)
            if self.error_queue == self.name:
                raise ConfigurationError(f"queue {self.name!r} cannot be its own error queue")
        if self.max_attempts is not None and (
            not isinstance(self.max_attempts, int) or not 1 <= self.max_attempts < 2**31
        ):
            raise ConfigurationError(
                "max_attempts must be a positive integer below 2**31 or None, "
                f"not {self.max_attempts!r}"
            )
        if self.durability not in ("persistent", "transient"):
            raise ConfigurationError(
                f"durability must be 'persistent' or 'transient', not {self.durability!r}"
            )
        if not isinstance(self.max_size, int) or not 1 <= self.max_size < 2**63:
            raise ConfigurationError(
                f"max_size must be a positive integer below 2**63 (bytes), not {self.max_size!r}"
            )
        for name in self.types:
            check_name(name, "message type")
        if len(set(self.types)) != len(self.types):
            raise ConfigurationError(f"queue {self.name!r} lists a message type twice")
        for type_name, expression in self.priority:
            if type_name != ANY_TYPE:
                check_name(type_name, "message type")
            if self.types and type_name not in (*self.types, ANY_TYPE):
                raise ConfigurationError(
                    f"queue {self.name!r} has a priority function for {type_name!r}, "
                    "a type it does not accept"
                )
            # Imported here: sqlglot loads only once a queue has priority functions.
            from sluice.expr import parse  # noqa: PLC0415

            parse(expression, want="number")

    def _check_limits(self) -> None:
        if self.priority_levels is not None and (
            type(self.priority_levels) is not int
            or not 1 <= self.priority_levels <= MAX_PRIORITY_LEVELS
        ):
            raise ConfigurationError(
                f"priority_levels must be an integer from 1 to {MAX_PRIORITY_LEVELS} or None, "
                f"not {self.priority_levels!r}"
            )
        if self.max_in_flight is not None and (
            type(self.max_in_flight) is not int or not 1 <= self.max_in_flight < 2**31
        ):
            raise ConfigurationError(
                "max_in_flight must be a positive integer below 2**31 or None, "
                f"not {self.max_in_flight!r}"
            )
        if self.retention is not None and (
            isinstance(self.retention, bool)
            or not isinstance(self.retention, (int, float))
            or not self.retention >= 0
        ):
            raise ConfigurationError(
                f"retention must be seconds (>= 0), 'forever' or None, not {self.retention!r}"
            )
        if self.isolation not in ISOLATION_LEVELS:
            raise ConfigurationError(
                f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, not {self.isolation!r}"
            )

    def _check_topics(self) -> None:
        if self.kind not in KINDS:
            raise ConfigurationError(f"kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if (self.kind == "subscription") != (self.topic is not None):
            raise ConfigurationError("a subscription, and only a subscription, names its topic")
        if self.kind != "subscription" and (
            self.selector is not None
            or not self.durable
            or self.expire_after is not None
            or self.window is not None
        ):
            raise ConfigurationError(
                "where, durable, expire_after and window are settings of subscriptions"
            )
        if self.kind != "queue" and self.isolation != "none":
            raise ConfigurationError(
                f"{self.kind} {self.name!r}: isolation levels are for plain queues only"
            )
        if self.kind == "topic" and (self.max_in_flight is not None or self.max_attempts):
            raise ConfigurationError(
                f"topic {self.name!r} is not consumed itself: max_in_flight and max_attempts "
                "are settings of its subscriptions"
            )
        if self.expire_after is not None and (
            isinstance(self.expire_after, bool)
            or not isinstance(self.expire_after, (int, float))
            or not self.expire_after > 0
        ):
            raise ConfigurationError(
                f"expire_after must be a positive number of seconds or None, "
                f"not {self.expire_after!r}"
            )
        if self.window is not None and (
            type(self.window) is not int or not 1 <= self.window <= 1_000_000
        ):
            raise ConfigurationError(
                f"window must be an integer from 1 to 1000000, not {self.window!r}"
            )

    @property
    def priority_functions(self) -> dict[str, str]:
        """The priority expressions by message type."""
        return dict(self.priority)


def spec_params(spec: QueueSpec) -> dict[str, object]:
    """A queue's settings as the catalog tables store them (``paused`` apart: only pausing
    and resuming write it, so that altering a setting never undoes another's pause)."""
    return {
        "name": spec.name,
        "max_attempts": spec.max_attempts,
        "error_queue": spec.error_queue,
        "durability": spec.durability,
        "max_size": spec.max_size,
        "types": json.dumps(list(spec.types)) if spec.types else None,
        "priority_functions": json.dumps(dict(spec.priority)) if spec.priority else None,
        "isolation": spec.isolation,
        "kind": spec.kind,
        "topic": spec.topic,
        "selector": spec.selector,
        "durable": spec.durable,
        "expire_after": spec.expire_after,
        "pull_window": spec.window,
        "priority_levels": spec.priority_levels,
        "max_in_flight": spec.max_in_flight,
        "retention": spec.retention,
    }


def spec_from_row(row: tuple[Any, ...]) -> QueueSpec:
    """The inverse of spec_params, from the columns get_queue reads (name, max_attempts,
    error_queue, durability, max_size, types, priority_functions, isolation, kind, the
    topic's name, selector, durable, expire_after, pull_window, priority_levels,
    max_in_flight, retention, paused)."""
    name, max_attempts, error_queue, durability, max_size, types, priority, isolation = row[:8]
    kind, topic, selector, durable, expire_after, window, levels, in_flight, retention = row[8:17]
    functions: Mapping[str, str] = json.loads(priority) if priority else {}
    return QueueSpec(
        name,
        max_attempts,
        error_queue,
        durability,
        max_size,
        tuple(json.loads(types)) if types else (),
        tuple(functions.items()),
        isolation,
        kind,
        topic,
        selector,
        bool(durable),
        expire_after,
        window,
        levels,
        in_flight,
        retention,
        bool(row[17]),
    )


def priority_level(priority: int, levels: int) -> int:
    """The level of ``priority`` among ``levels`` levels, as Qpid maps AMQP 0-10/JMS 0-9.

    With 2 levels 0-4 and 5-9; with 3 levels 0-3, 4 and 5-9; with 10 each its own.
    Priorities below 0 or above 9 fall in the lowest or highest level.
    """
    first = 5 - min(5, (levels + 1) // 2)
    return 0 if priority <= first else min(priority - first, levels - 1)
