"""A gateway queue's definition: its queue, direction, transport and settings, and the
settings every outgoing gateway shares (attempts and backoff)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

from sluice.backends.records import StoredGateway
from sluice.errors import ConfigurationError

__all__ = ["DEFAULT_ATTEMPTS", "DEFAULT_BACKOFF", "DIRECTIONS", "Direction", "Gateway"]

Direction = Literal["in", "out"]
DIRECTIONS: Final = ("in", "out")

DEFAULT_ATTEMPTS = 3
"""Tries of one message by an outgoing gateway before it becomes an error message."""
DEFAULT_BACKOFF = 1.0
"""Seconds before the second try; each further try waits twice as long (at most 60 s)."""
MAX_BACKOFF = 60.0
"""The longest wait between two tries by default (``max_backoff``)."""

Setting = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Gateway:
    """The gateway of ``queue``: ``direction`` ``in`` (its transport brings messages in)
    or ``out`` (its transport sends what is put into it), through ``transport`` with
    ``settings`` (each transport says which it takes, docs/gateways.md)."""

    queue: str
    direction: Direction
    transport: str
    settings: Mapping[str, Setting] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ConfigurationError(
                f"a gateway's direction is 'in' or 'out', not {self.direction!r}"
            )
        for name, value in self.settings.items():
            if not isinstance(value, str | int | float | bool):
                raise ConfigurationError(
                    f"gateway {self.queue!r}: setting {name!r} is a text, a number or a "
                    f"boolean, not {type(value).__name__}"
                )

    def text(self, name: str, default: str | None = None) -> str | None:
        value = self.settings.get(name, default)
        if value is not None and not isinstance(value, str):
            raise ConfigurationError(f"gateway {self.queue!r}: {name} is a text, not {value!r}")
        return value

    def number(self, name: str, default: float, *, minimum: float = 0.0) -> float:
        value = self.settings.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigurationError(f"gateway {self.queue!r}: {name} is a number, not {value!r}")
        if not math.isfinite(value) or value < minimum:
            raise ConfigurationError(
                f"gateway {self.queue!r}: {name} is a number >= {minimum:g}, not {value!r}"
            )
        return float(value)

    @property
    def attempts(self) -> int:
        """Tries of one message before it becomes an error message (``attempts``)."""
        return int(self.number("attempts", DEFAULT_ATTEMPTS, minimum=1))

    def backoff(self, tried: int) -> float:
        """Seconds to wait after the ``tried``-th failed try: ``backoff``, doubling up to
        ``max_backoff`` (default 60)."""
        first = self.number("backoff", DEFAULT_BACKOFF)
        cap = self.number("max_backoff", MAX_BACKOFF)
        return float(min(first * 2 ** min(tried - 1, 64), cap))

    def stored(self) -> str:
        """The settings as the store keeps them (JSON text)."""
        return json.dumps(dict(self.settings), sort_keys=True)

    @classmethod
    def of(cls, row: StoredGateway) -> Gateway:
        settings: dict[str, Any] = json.loads(row.settings)
        return cls(row.queue, cast(Direction, row.direction), row.transport, settings)
