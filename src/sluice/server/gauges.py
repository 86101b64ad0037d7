"""What ``/metrics`` reads from the database at each scrape: queues' messages by state,
their lag and whether they are paused, subscriptions' lag, open jobs' progress, profiles'
limits against their starts. The database holds all of it, so every worker of a server
answers alike."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

import sluice
from sluice.jobs.model import JobRow
from sluice.server.grants import Principal
from sluice.server.profiles import usage

__all__ = ["JOBS_SHOWN", "Gauges"]

JOBS_SHOWN = 100
"""Open jobs with series, the newest first: a label per job must stay a bounded set."""


class Gauges:
    """The database's series that ``who`` may see (a prometheus_client collector)."""

    def __init__(self, db: sluice.Database, who: Principal) -> None:
        self._db = db
        self._who = who

    def collect(self) -> Iterator[Metric]:
        yield from self._queues()
        if self._who.admin:  # jobs and task types belong to no one queue
            yield from self._jobs()
            yield from self._profiles()

    def _queues(self) -> Iterator[Metric]:
        db, now = self._db, self._db.clock.now()
        # Counted as the console and the CLI count them: a subscription's messages still
        # in its topic are its own, ready or delayed, and its oldest ready among them.
        rows = [r for r in db.overview() if self._who.allows(r.name, "browse")]
        info = GaugeMetricFamily(
            "sluice_queue_info",
            "Each queue: its kind (queue, topic, subscription) and its error queue",
            labels=("queue", "kind", "error_queue"),
        )
        lag = GaugeMetricFamily(
            "sluice_subscription_lag_messages",
            "Messages a subscription has yet to settle: taken, or still in its topic",
            labels=("subscription", "topic"),
        )
        lag_seconds = GaugeMetricFamily(
            "sluice_subscription_lag_seconds",
            "How long a subscription's oldest unsettled message has waited",
            labels=("subscription", "topic"),
        )
        for row in rows:
            sub = row.subscription
            if sub is not None:
                lag.add_metric((sub.name, sub.topic), sub.lag)
                lag_seconds.add_metric((sub.name, sub.topic), sub.lag_seconds(now))
        messages = GaugeMetricFamily(
            "sluice_queue_messages",
            "Messages by state; claimed ones are in flight (leased, or held by a transaction)",
            labels=("queue", "state"),
        )
        age = GaugeMetricFamily(
            "sluice_queue_oldest_ready_age_seconds",
            "How long the oldest ready message has been takeable (0: none is ready)",
            labels=("queue",),
        )
        paused = GaugeMetricFamily(
            "sluice_queue_paused",
            "1 while a queue is paused (its consumers take nothing), else 0",
            labels=("queue",),
        )
        errors = GaugeMetricFamily(
            "sluice_queue_error_messages",
            "Messages ready in the queue's error queue (of every queue that shares it)",
            labels=("queue", "error_queue"),
        )
        waiting = GaugeMetricFamily(
            "sluice_queue_waiting_consumers",
            "Consumers of this server process blocked waiting for a message (long polls, "
            "event streams)",
            labels=("queue",),
        )
        blocked = db.context.wakeups.waiting()
        for row in rows:
            spec = row.spec
            waiting.add_metric((spec.name,), blocked.get(spec.name, 0))
            info.add_metric((spec.name, spec.kind, spec.error_queue or ""), 1)
            paused.add_metric((spec.name,), 1 if spec.paused else 0)
            for state, count in row.counts.items():  # every counted state (COUNTED_STATES)
                messages.add_metric((spec.name, state), count)
            age.add_metric((spec.name,), row.oldest_age(now))
            if spec.error_queue is not None and self._who.allows(spec.error_queue, "browse"):
                errors.add_metric((spec.name, spec.error_queue), row.error_ready or 0)
        yield from (info, paused, messages, age, errors, lag, lag_seconds, waiting)

    def _jobs(self) -> Iterator[Metric]:
        rows = self._db.backend.jobs_read("job_list", {"open": 1, "limit": JOBS_SHOWN})
        tasks = GaugeMetricFamily(
            "sluice_job_tasks",
            f"Tasks of the {JOBS_SHOWN} newest open jobs: succeeded, failed, unfinished",
            labels=("job", "name", "state"),
        )
        progress = GaugeMetricFamily(
            "sluice_job_progress_ratio",
            "Fraction of an open job's tasks that are finished, 0 to 1",
            labels=("job", "name"),
        )
        for job in map(JobRow._make, rows):
            total, succeeded, failed = int(job.total), int(job.succeeded), int(job.failed)
            for state, n in (("succeeded", succeeded), ("failed", failed),
                             ("unfinished", total - succeeded - failed)):  # fmt: skip
                tasks.add_metric((job.id, job.name, state), n)
            progress.add_metric((job.id, job.name), (succeeded + failed) / total if total else 1.0)
        yield from (tasks, progress)

    def _profiles(self) -> Iterator[Metric]:
        limit = GaugeMetricFamily(
            "sluice_profile_limit",
            "Starts a task type's profile allows in the current hour or cycle",
            labels=("task_type", "window"),
        )
        starts = GaugeMetricFamily(
            "sluice_profile_starts",
            "Starts taken in the current hour or cycle, by all workers",
            labels=("task_type", "window"),
        )
        for window in usage(self._db, self._db.clock.now()):
            if window.limit is not None:
                limit.add_metric((window.task_type, window.window), window.limit)
            starts.add_metric((window.task_type, window.window), window.starts)
        yield from (limit, starts)
