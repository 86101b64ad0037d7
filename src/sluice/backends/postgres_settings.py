"""The options of a PostgreSQL connection, as a frozen value (``sluice.connect`` fills it)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PostgresSettings"]


@dataclass(frozen=True, slots=True)
class PostgresSettings:
    """Options of a PostgreSQL connection (see ``sluice.connect``)."""

    schema: str = "sluice"
    pool_size: int = 10
    migrate: bool = True
    fallback: float = 1.0
    """Seconds between checks for work that do not wait for a notification."""
    notify_interval: float = 0.005
    """At most one NOTIFY per this many seconds per process."""
    connect_timeout: float = 10.0
    rotate_every: int = 2_000
    """Messages between rotations of the message partitions (postgres_maintenance)."""
    rotate_max_move: int = 10_000
    """A partition with more live rows than this waits to be rotated until it drains."""
    maintenance_interval: float = 1.0
    """Seconds between rotation checks (0: no maintenance thread)."""
