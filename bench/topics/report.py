"""What ``bench.topics`` measures, per case, and its Markdown report: publish cost against a
plain queue, delivered messages/s against RabbitMQ's fanout, and lag over time."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.harness import percentile

__all__ = [
    "DELIVERY_TARGET",
    "PUBLISH_TARGET",
    "SELECTOR",
    "Case",
    "Outcome",
    "Publish",
    "Sample",
    "Settings",
    "render",
]

PUBLISH_TARGET = 1.3
"""Publishing into a topic with 10 subscriptions costs at most 1.3 x publishing into a queue."""
DELIVERY_TARGET = 1.0
"""Delivered messages/s with 10 subscriptions >= 1 x RabbitMQ's fanout to 10 queues."""
SELECTOR = "floor(body.n / 10) * 10 = body.n"
"""A selector that holds for 10% of the messages (``%`` is not in sluice's expression
language, docs/expressions.md, so the multiple of 10 is written with floor)."""

SYSTEM_LABELS = {
    "sqlite": "sluice, SQLite file",
    "postgresql": "sluice, PostgreSQL",
    "rabbitmq": "RabbitMQ",
}


@dataclass(frozen=True)
class Case:
    """One configuration: a system, what is published into, its subscriptions and batch size.

    Picklable: it travels to the publisher and consumer processes.
    """

    system: str
    """``sqlite``, ``postgresql`` or ``rabbitmq``."""
    target: str
    """``queue`` (a plain sluice queue, one consumer), ``topic`` or ``fanout`` (RabbitMQ)."""
    subscriptions: int
    """Subscriptions (queues bound to the fanout); each has its own consumer."""
    mix: str
    """``all``: every subscription receives everything; ``half``: every second one has
    the selector that holds for 10% of the messages."""
    batch: int
    """Messages per publishing transaction (confirm batch) and per consumer transaction (ack)."""
    alone: int
    """Messages published before any consumer runs (the publish cost alone, then the drain)."""
    live: int
    """Messages published while every consumer runs (delivered/s and lag)."""

    def selective(self, index: int) -> bool:
        """Whether subscription ``index`` has the 10% selector."""
        return self.mix == "half" and index % 2 == 1

    def expected(self, index: int, published: int) -> int:
        """What subscription ``index`` receives of messages 0 .. published - 1 (body n = index)."""
        return (published + 9) // 10 if self.selective(index) else published

    def receivers(self, published: int) -> int:
        """Deliveries the messages 0 .. published - 1 make in all subscriptions together."""
        return sum(self.expected(i, published) for i in range(self.subscriptions))

    @property
    def label(self) -> str:
        if self.target == "queue":
            return "plain queue"
        kind = "fanout, queues" if self.target == "fanout" else "topic, subscriptions"
        mix = {"all": "", "half": ", half select 10%", "acks": ", acks unsynced"}[self.mix]
        return f"{kind}: {self.subscriptions}{mix}"


@dataclass(frozen=True)
class Settings:
    """The run as a whole, for the report."""

    quick: bool
    sample_every: float
    sqlite_url: str
    pg_url: str
    deadline: float


@dataclass
class Publish:
    """The publisher's puts and commits (confirms, for RabbitMQ) of one phase."""

    messages: int
    seconds: float
    commit_ms: list[float] = field(default_factory=list)
    """Per transaction (or confirmed batch): wall time of the put and its commit, ms."""

    @property
    def us_per_message(self) -> float:
        return self.seconds / self.messages * 1e6 if self.messages else 0.0

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def percentile(self, q: float) -> float:
        return percentile(self.commit_ms, q)


@dataclass(frozen=True)
class Sample:
    """Lag at one moment of the live phase: published minus delivered, per subscription."""

    at: float
    """Seconds since the live phase's first publish."""
    published: int
    lag_max: int
    lag_mean: float


@dataclass
class Outcome:
    """One case: publish alone, drain, live (publisher and consumers together)."""

    case: Case
    alone: Publish | None = None
    paired: Publish | None = None
    """A plain queue's publishing in the same phase, transaction for transaction (topics)."""
    drain_seconds: float = 0.0
    drain_deliveries: int = 0
    live: Publish | None = None
    live_seconds: float = 0.0
    """From the live phase's first publish to its last delivery."""
    live_deliveries: int = 0
    samples: list[Sample] = field(default_factory=list)
    lost: int = 0
    """Deliveries that never came (a subscription skipped messages its selector holds for)."""
    error: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def drain_rate(self) -> float | None:
        if self.error or self.drain_seconds <= 0:
            return None
        return self.drain_deliveries / self.drain_seconds

    @property
    def delivered_rate(self) -> float | None:
        if self.error or self.live_seconds <= 0:
            return None
        return self.live_deliveries / self.live_seconds

    @property
    def catch_up(self) -> float | None:
        """Seconds the consumers needed after the publisher's last commit (confirm)."""
        if self.error or self.live is None:
            return None
        return max(self.live_seconds - self.live.seconds, 0.0)

    @property
    def peak_lag(self) -> int | None:
        return max((s.lag_max for s in self.samples), default=None)

    @property
    def mean_lag(self) -> float | None:
        if not self.samples:
            return None
        return statistics.fmean(s.lag_mean for s in self.samples)


# ---------------------------------------------------------------------- report


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _find(results: Sequence[Outcome], key: tuple[str, str, int, str, int]) -> Outcome | None:
    """The outcome of (system, target, subscriptions, mix, batch), if it ran."""
    for out in results:
        c = out.case
        if (c.system, c.target, c.subscriptions, c.mix, c.batch) == key:
            return out
    return None


def _publish_ratio(out: Outcome) -> str:
    """The topic's publishing over the plain queue's, alternating in one phase: by the wall
    time, and by the median transaction."""
    if out.alone is None or out.paired is None or not out.paired.seconds:
        return "-"
    mean = out.alone.us_per_message / out.paired.us_per_message
    p50 = out.alone.percentile(50) / max(out.paired.percentile(50), 1e-9)
    return f"{mean:.2f} ({p50:.2f})"


def _per_tx(pub: Publish | None) -> str:
    if pub is None:
        return "-"
    return f"{pub.us_per_message:,.0f} ({pub.percentile(50):.2f} / {pub.percentile(99):.2f})"


def _case_rows(results: Sequence[Outcome], system: str, batch: int) -> list[str]:
    queue = _find(results, (system, "queue", 1, "all", batch))
    lines = [
        "| publish into | N | alone: µs per message (p50 / p99 ms per tx)"
        " | a plain queue, alternating | topic / queue (p50) | drain, deliveries/s"
        " | live: µs per message | vs the plain queue's case | delivered/s | catch-up s"
        " | peak lag | mean lag | lost |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for out in results:
        c = out.case
        if c.system != system or c.batch != batch:
            continue
        if out.error:
            lines.append(f"| {c.label} | {c.alone:,} | error: {out.error} |" + " |" * 10)
            continue
        live = out.live
        vs_live = "-"
        if queue is not None and not queue.error and queue.live and live:
            vs_live = f"{live.us_per_message / queue.live.us_per_message:.2f}"
        lost = f"**{out.lost:,}**" if out.lost else "0"
        lines.append(
            f"| {c.label} | {c.alone:,} | {_per_tx(out.alone)} | {_per_tx(out.paired)}"
            f" | {_publish_ratio(out)} | {_f(out.drain_rate)}"
            f" | {_f(live.us_per_message if live else None)} | {vs_live}"
            f" | {_f(out.delivered_rate)} | {_f(out.catch_up, 2)}"
            f" | {_f(out.peak_lag)} | {_f(out.mean_lag, 1)} | {lost} |"
        )
    return lines


def _lag_series(out: Outcome, limit: int = 24) -> list[str]:
    samples = out.samples
    if len(samples) > limit:  # keep the shape: every k-th sample, and the last
        step = -(-len(samples) // limit)
        samples = samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else [])
    lines = ["| s | published | lag max | lag mean |", "|---:|---:|---:|---:|"]
    lines += [
        f"| {s.at:.1f} | {s.published:,} | {s.lag_max:,} | {s.lag_mean:,.1f} |" for s in samples
    ]
    return lines


def _targets(results: Sequence[Outcome], batches: Sequence[int]) -> list[str]:
    lines: list[str] = []
    for system in ("sqlite", "postgresql"):
        for batch in batches:
            topic = _find(results, (system, "topic", 10, "all", batch))
            if topic is None:
                continue
            head = f"{SYSTEM_LABELS[system]}, batch {batch}"
            if topic.error or not topic.alone or not topic.paired:
                lines.append(f"- MISS  {head}: publish cost has no figure ({topic.error})")
            else:
                ratio = topic.alone.us_per_message / topic.paired.us_per_message
                verdict = "PASS" if ratio <= PUBLISH_TARGET else "MISS"
                lines.append(
                    f"- {verdict}  {head}: publish cost, topic with 10 subscriptions / plain"
                    f" queue = {topic.alone.us_per_message:,.0f} / "
                    f"{topic.paired.us_per_message:,.0f} µs per message = {ratio:.2f}"
                    f" (need <= {PUBLISH_TARGET:g}); median transaction: {_publish_ratio(topic)}"
                )
            rabbit = _find(results, ("rabbitmq", "fanout", 10, "all", batch))
            if rabbit is None:
                continue
            mine, theirs = topic.delivered_rate, rabbit.delivered_rate
            if mine is None or theirs is None:
                lines.append(f"- MISS  {head}: delivered/s has no figure")
                continue
            verdict = "PASS" if mine / theirs >= DELIVERY_TARGET and not topic.lost else "MISS"
            lines.append(
                f"- {verdict}  {head}: delivered/s, 10 subscriptions / RabbitMQ fanout to 10"
                f" queues = {mine:,.0f} / {theirs:,.0f} = {mine / theirs:.2f}"
                f" (need >= {DELIVERY_TARGET:g}); drain alone: {_f(topic.drain_rate)} /"
                f" {_f(rabbit.drain_rate)}"
                + (f"; **{topic.lost:,} deliveries lost**" if topic.lost else "")
            )
            fast = _find(results, (system, "topic", 10, "acks", batch))
            if fast is not None and fast.delivered_rate is not None:
                rate = fast.delivered_rate
                verdict = "PASS" if rate / theirs >= DELIVERY_TARGET and not fast.lost else "MISS"
                lines.append(
                    f"- {verdict}  {head}, subscriptions acknowledging as RabbitMQ's acks do"
                    f" (durability='transient': no fsync at settle): delivered/s = {rate:,.0f}"
                    f" / {theirs:,.0f} = {rate / theirs:.2f} (need >= {DELIVERY_TARGET:g})"
                    + (f"; **{fast.lost:,} deliveries lost**" if fast.lost else "")
                )
    return lines


def render(
    results: Sequence[Outcome],
    facts: Sequence[tuple[str, str]],
    settings: Settings,
    workload: Sequence[str],
    findings: Sequence[str] = (),
) -> str:
    """The whole report: machine, workload, a table per system and batch, lag, targets."""
    batches = sorted({o.case.batch for o in results})
    title = "sluice topics against a plain queue and RabbitMQ's fanout"
    out = [f"# {title}, {facts[0][1]}", ""]
    if settings.quick:
        out += ["**Quick smoke run: figures too small to compare.**", ""]
    out += ["## Machine and servers", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in facts]
    out += ["", "## Workload", "", *workload]
    for system in ("sqlite", "postgresql", "rabbitmq"):
        for batch in batches:
            rows = _case_rows(results, system, batch)
            if len(rows) <= 2:
                continue
            out += ["", f"## {SYSTEM_LABELS[system]}, batch {batch}", ""]
            out += rows
    out += ["", "## Lag over time, 10 subscriptions (10 queues) receiving everything", ""]
    out += [
        f"Sampled every {settings.sample_every:g} s of the live phase: published (committed,"
        " or confirmed) minus delivered (committed, or acked), per subscription; the largest"
        " and the mean over the 10.",
    ]
    for batch in batches:
        for system in ("sqlite", "postgresql", "rabbitmq"):
            target = "fanout" if system == "rabbitmq" else "topic"
            found = _find(results, (system, target, 10, "all", batch))
            if found is None or found.error or not found.samples:
                continue
            out += ["", f"### {SYSTEM_LABELS[system]}, batch {batch}", ""]
            out += _lag_series(found)
    out += ["", "## Targets", ""]
    out += _targets(results, batches)
    notes = [f"- {o.case.system} {o.case.label}, batch {o.case.batch}: {n}" for o in results
             for n in o.notes]  # fmt: skip
    if notes:
        out += ["", "## Notes", "", *notes]
    if findings:
        out += ["", *findings]
    out.append("")
    return "\n".join(out)
