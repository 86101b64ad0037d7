"""What the console's pages show, read from the database for one key: its queues with
their counts and charts, subscriptions with their lag, and for an admin key the jobs,
profiles and rules. Counts come from one statement over all queues."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

import sluice
from sluice.catalog import QueueSpec
from sluice.jobs.model import FAR, JobStatus
from sluice.server.console.chart import line_chart, rates, sparkline
from sluice.server.console.pages import when
from sluice.server.console.samples import Sample, series
from sluice.server.grants import Principal
from sluice.server.profiles import usage

__all__ = [
    "ErrorRow",
    "QueueRow",
    "SubscriptionRow",
    "admin_view",
    "error_rows",
    "queue_charts",
    "queue_rows",
    "sees",
    "shown_body",
    "shown_properties",
    "subscription_rows",
]

JOBS_SHOWN = 50
"""Jobs on the dashboard: the newest open ones."""

_ACTIONS = ("produce", "consume", "browse", "manage")


def sees(who: Principal, queue: str) -> bool:
    """Whether the key has any grant on the queue (it is listed to it, as by the API)."""
    return any(who.allows(queue, action) for action in _ACTIONS)


@dataclass(frozen=True, slots=True)
class QueueRow:
    spec: QueueSpec
    ready: int
    """A subscription's include those still in its topic, as Queue.stats counts them."""
    delayed: int
    claimed: int
    failed: int
    """Kept failed in the queue itself (by a queue without an error queue)."""
    errors: int | None
    """Ready in its error queue (None: it has none, or the key may not browse it)."""
    oldest: float
    """Seconds the oldest ready message has waited."""
    spark: Markup
    rate: float | None
    """Net change per second over the last two samples."""
    paused: bool
    manage: bool

    @property
    def all_failed(self) -> int:
        """What failed of its messages: kept failed here, and ready in its error queue
        (where its rejects go; one shared by several queues counts for each)."""
        return self.failed + (self.errors or 0)


def queue_rows(db: sluice.Database, who: Principal, samples: list[Sample]) -> list[QueueRow]:
    now = db.clock.now()
    rows = []
    for row in db.overview():
        spec = row.spec
        if not sees(who, spec.name):
            continue
        errors = None
        if spec.error_queue is not None and who.allows(spec.error_queue, "browse"):
            errors = row.error_ready
        points = series(samples[-60:], spec.name)
        net = rates(points[-2:])
        c = row.counts
        rows.append(
            QueueRow(
                spec,
                c["ready"],
                c["delayed"],
                c["claimed"],
                c["failed"],
                errors,
                row.oldest_age(now),
                sparkline(points),
                net[-1][1] if net else None,
                spec.paused,
                who.allows(spec.name, "manage"),
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class ErrorRow:
    """Where failed messages wait: an error queue (``ready`` there), or a queue without
    one that keeps its own as ``failed``."""

    name: str
    held: int
    state: str
    """The state its failed messages are browsed in."""
    sources: tuple[str, ...]
    """The queues whose error queue it is (none: it keeps its own)."""


def error_rows(rows: list[QueueRow]) -> list[ErrorRow]:
    """The error queues among ``rows`` (those the key sees), and the queues that keep
    failed messages themselves."""
    sources: dict[str, list[str]] = {}
    for row in rows:
        if row.spec.error_queue is not None:
            sources.setdefault(row.spec.error_queue, []).append(row.spec.name)
    found = []
    for row in rows:
        name = row.spec.name
        if name in sources:
            found.append(ErrorRow(name, row.ready, "ready", tuple(sorted(sources[name]))))
        elif row.failed:
            found.append(ErrorRow(name, row.failed, "failed", ()))
    return found


@dataclass(frozen=True, slots=True)
class SubscriptionRow:
    name: str
    topic: str
    where: str | None
    held: int
    backlog: int
    lag: int
    lag_seconds: float


def subscription_rows(db: sluice.Database, who: Principal) -> list[SubscriptionRow]:
    now = db.clock.now()
    if not any(s.kind == "subscription" and who.allows(s.name, "browse") for s in db.queues()):
        return []
    return [
        SubscriptionRow(s.name, s.topic, s.where, s.held, s.backlog, s.lag, s.lag_seconds(now))
        for s in db.subscriptions()
        if who.allows(s.name, "browse")
    ]


def admin_view(db: sluice.Database, who: Principal) -> dict[str, Any]:
    """Jobs, profiles and rules: they span queues, so only an admin key sees them (as
    through the API)."""
    if not who.admin:
        return {"jobs": [], "profiles": [], "rules": [], "slicings": []}
    now = db.clock.now()
    jobs: list[JobStatus] = db.jobs.list(open_only=True, limit=JOBS_SHOWN)
    app = db.rules.application
    return {
        "jobs": [(j, j.late(now)) for j in jobs],
        "profiles": usage(db, now),
        "rules": sorted((r.name, r.target, r.error_queue) for r in app.rules.values()),
        "slicings": sorted((s.name, s.property) for s in app.slicings.values()),
    }


def queue_charts(samples: list[Sample], queue: str) -> list[Markup]:
    """The queue's depth and net rate over time; for a task type's queue under a profile,
    its starts this hour against the profile's limit."""
    points = series(samples, queue)
    charts = [
        line_chart(points, title="depth (ready, delayed, in flight)"),
        line_chart(rates(points), title="net change per second"),
    ]
    hourly = [(s.at, s.starts[queue]) for s in samples if queue in s.starts]
    if hourly:
        limit = hourly[-1][1][1]
        charts.append(
            line_chart(
                [(t, n) for t, (n, _) in hourly],
                title="starts this hour",
                limit=limit,
                limit_label="profile limit",
            )
        )
    return charts


def shown_body(m: sluice.Message, limit: int = 400) -> str:
    """A message's body as text, cut to ``limit`` characters."""
    body = m.body
    if isinstance(body, bytes):
        text = f"<{len(body)} bytes>"
    elif isinstance(body, str):
        text = body
    else:
        try:
            text = json.dumps(body, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(body)
    return text if len(text) <= limit else text[:limit] + "…"


_TIMES = ("deadline", "job_deadline")
"""A task's properties that are times (sluice.jobs): epoch seconds, FAR for none."""


def shown_properties(m: sluice.Message) -> str:
    """A message's properties as ``name=value`` text; a task's deadlines as times, or
    ``none`` (they are stored as FAR, a number no person should be shown)."""
    task = "job_priority" in m.properties  # every task message has it (jobs/submit.py)
    parts = []
    for name, value in m.properties.items():
        if task and name in _TIMES and isinstance(value, int | float):
            text = "none" if value >= FAR else when(value)
        else:
            text = json.dumps(value, ensure_ascii=False, default=str)
        parts.append(f"{name}={text}")
    return " · ".join(parts)
