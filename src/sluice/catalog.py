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
    "ISOLATION_LEVELS",
    "Durability",
    "Isolation",
    "QueueSpec",
    "check_name",
    "check_queue_name",
    "spec_from_row",
    "spec_params",
]

Durability = Literal["persistent", "transient"]

Isolation = Literal["none", "ordered", "blockwise", "ordered_blockwise"]
ISOLATION_LEVELS: tuple[str, ...] = ("none", "ordered", "blockwise", "ordered_blockwise")

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
    """

    name: str
    max_attempts: int | None = None
    error_queue: str | None = None
    durability: Durability = "persistent"
    max_size: int = DEFAULT_MAX_SIZE
    types: tuple[str, ...] = ()
    priority: tuple[tuple[str, str], ...] = ()
    isolation: Isolation = "none"

    def __post_init__(self) -> None:
        check_queue_name(self.name)
        if self.isolation not in ISOLATION_LEVELS:
            raise ConfigurationError(
                f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, not {self.isolation!r}"
            )
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

    @property
    def priority_functions(self) -> dict[str, str]:
        """The priority expressions by message type."""
        return dict(self.priority)


def spec_params(spec: QueueSpec) -> dict[str, object]:
    """A queue's settings as the catalog tables store them."""
    return {
        "name": spec.name,
        "max_attempts": spec.max_attempts,
        "error_queue": spec.error_queue,
        "durability": spec.durability,
        "max_size": spec.max_size,
        "types": json.dumps(list(spec.types)) if spec.types else None,
        "priority_functions": json.dumps(dict(spec.priority)) if spec.priority else None,
        "isolation": spec.isolation,
    }


def spec_from_row(row: tuple[Any, ...]) -> QueueSpec:
    """The inverse of spec_params, from (name, max_attempts, error_queue, durability,
    max_size, types, priority_functions, isolation)."""
    name, max_attempts, error_queue, durability, max_size, types, priority, isolation = row
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
    )
