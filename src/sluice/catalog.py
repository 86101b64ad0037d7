"""Queue definitions: what the catalog in the database records for each queue."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from sluice.errors import ConfigurationError

__all__ = ["DEFAULT_MAX_SIZE", "Durability", "QueueSpec", "check_queue_name"]

Durability = Literal["persistent", "transient"]

DEFAULT_MAX_SIZE = 1024 * 1024
"""Largest body a queue accepts unless told otherwise: 1 MiB."""

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]{0,199}$")


def check_queue_name(name: str) -> str:
    """Queue names travel in URLs, file names and CLI arguments: keep them plain."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"invalid queue name {name!r}: use 1-200 letters, digits and _ . : - "
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
    """

    name: str
    max_attempts: int | None = None
    error_queue: str | None = None
    durability: Durability = "persistent"
    max_size: int = DEFAULT_MAX_SIZE

    def __post_init__(self) -> None:
        check_queue_name(self.name)
        if self.error_queue is not None:
            check_queue_name(self.error_queue)
            if self.error_queue == self.name:
                raise ConfigurationError(f"queue {self.name!r} cannot be its own error queue")
        if self.max_attempts is not None and (
            not isinstance(self.max_attempts, int) or self.max_attempts < 1
        ):
            raise ConfigurationError(
                f"max_attempts must be a positive integer or None, not {self.max_attempts!r}"
            )
        if self.durability not in ("persistent", "transient"):
            raise ConfigurationError(
                f"durability must be 'persistent' or 'transient', not {self.durability!r}"
            )
        if not isinstance(self.max_size, int) or self.max_size < 1:
            raise ConfigurationError(f"max_size must be a positive integer, not {self.max_size!r}")
