"""The options of a PostgreSQL connection, as a frozen value (``sluice.connect`` fills it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["POOLERS", "PostgresSettings", "libpq_seconds"]

POOLERS = ("transaction",)
"""What ``pooler=`` may declare: a pooler that hands out a server connection per transaction."""

DEFAULT_PREPARE_THRESHOLD = 5
"""psycopg's own: a statement run this many times on a connection is prepared on the server."""


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
    pooler: Literal["transaction"] | None = None
    """The URL reaches PostgreSQL through a transaction-mode pooler (PgBouncer, Supavisor...):
    no session state, no prepared statements unless ``prepare_threshold`` says so, LISTEN
    and maintenance on ``direct`` (docs/postgresql.md, "Behind a pooler")."""
    direct: str | None = None
    """A libpq URL that reaches the same database without the pooler, for LISTEN and
    maintenance; None: notifications are not listened to, the ``fallback`` tick wakes."""
    group_commit: bool = True
    """Acknowledgements that threads of one Database commit at once share a transaction."""
    prepare_threshold: int | Literal["auto"] | None = "auto"
    """psycopg's: executions before a statement is prepared on the server; None: never.
    "auto": 5 on a direct connection, never behind a pooler."""

    @property
    def prepare_after(self) -> int | None:
        """The ``prepare_threshold`` the connections get."""
        if self.prepare_threshold == "auto":
            return None if self.pooler else DEFAULT_PREPARE_THRESHOLD
        return self.prepare_threshold


def libpq_seconds(seconds: float) -> int:
    """``seconds`` as libpq's connect_timeout: whole seconds, rounded up, at least 1 (its
    0 means no limit, so a URL's 0.5 must not become that)."""
    return max(1, math.ceil(seconds))
