"""Every queue at a glance (``db.overview()``): counts, the oldest ready message, lag and the
error queue, counted once and the same way for the CLI, the console and the metrics.

A subscription's messages still in its topic are counted as its own (ready, or delayed while
not due), as ``Queue.stats`` counts them: a consumer of the subscription will receive them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.backends.records import COUNTED_STATES, QueueCounts
from sluice.catalog import QueueSpec
from sluice.engine.topics import Subscription

__all__ = ["QueueOverview", "overview"]


@dataclass(frozen=True, slots=True)
class QueueOverview:
    """One queue, topic or subscription as ``sluice queues`` shows it."""

    spec: QueueSpec
    counts: dict[str, int]
    """By state, as ``Queue.stats()`` counts them."""
    oldest_ready: float | None
    """When its oldest ready message became takeable (epoch seconds; None: none is ready)."""
    error_ready: int | None = None
    """Messages ready in its error queue (None: it has no error queue)."""
    subscription: Subscription | None = field(default=None)
    """For a subscription: its position and lag."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def depth(self) -> int:
        """Messages that consumers will still be given: ready, delayed and claimed."""
        return self.counts["ready"] + self.counts["delayed"] + self.counts["claimed"]

    def oldest_age(self, now: float) -> float:
        """Seconds the oldest ready message has waited at ``now`` (0: none is ready)."""
        return 0.0 if self.oldest_ready is None else max(now - self.oldest_ready, 0.0)

    def as_dict(self, now: float) -> dict[str, object]:
        """For ``--json`` and the HTTP API: plain values, ages in seconds."""
        sub = self.subscription
        return {
            "name": self.name,
            "kind": self.spec.kind,
            "topic": self.spec.topic,
            "paused": self.spec.paused,
            **self.counts,
            "depth": self.depth,
            "oldest_ready_age": round(self.oldest_age(now), 3),
            "error_queue": self.spec.error_queue,
            "error_ready": self.error_ready,
            "lag": None if sub is None else sub.lag,
            "lag_seconds": None if sub is None else round(sub.lag_seconds(now), 3),
        }


def overview(
    specs: list[QueueSpec], stats: dict[str, QueueCounts], subscriptions: list[Subscription]
) -> list[QueueOverview]:
    """The overview of ``specs`` from one ``stats_all()`` read and the subscriptions' lag."""
    subs = {s.name: s for s in subscriptions}
    rows = []
    for spec in specs:
        found = stats.get(spec.name)
        counts = dict.fromkeys(COUNTED_STATES, 0) | (dict(found.counts) if found else {})
        oldest = found.oldest_ready if found else None
        sub = subs.get(spec.name)
        if sub is not None:
            unpulled_ready = sub.backlog - sub.backlog_delayed
            counts["ready"] += unpulled_ready
            counts["delayed"] += sub.backlog_delayed
            if unpulled_ready and sub.oldest is not None:
                # The subscription knows its oldest unsettled message only (held or still
                # in the topic); with messages waiting in the topic that is close enough.
                oldest = sub.oldest if oldest is None else min(oldest, sub.oldest)
        error_ready = None
        if spec.error_queue is not None:
            error = stats.get(spec.error_queue)
            error_ready = error.counts["ready"] if error else 0
        rows.append(QueueOverview(spec, counts, oldest, error_ready, sub))
    return rows
