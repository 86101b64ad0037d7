"""The results of ``bench.rules`` and their Markdown report: tables, ratios, targets."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from bench.rules.latency import Latency
from bench.rules.procurement import Phases

__all__ = [
    "AsShipped",
    "Procurement",
    "Results",
    "Routing",
    "Timing",
    "render",
]

ENGINE_VS_BATCH = 2.0
ENGINE_VS_ONE = 5.0
P50_MS = 5.0
P99_MS = 20.0


@dataclass
class Routing:
    """One routing contender on one system: every run's seconds, or why there are none."""

    system: str
    contender: str
    """``rules`` (the engine, batch B) or ``hand`` (the loop, k per transaction)."""
    batch: int
    n: int
    statistics: str = ""
    """PostgreSQL: ``analyzed`` (ANALYZE after the load) or ``as loaded``; SQLite: ''."""
    seconds: list[float] = field(default_factory=list)
    error: str = ""

    @property
    def rate(self) -> float | None:
        if self.error or not self.seconds:
            return None
        return self.n / statistics.median(self.seconds)


@dataclass
class Procurement:
    system: str
    contender: str
    batch: int
    n: int
    phases: Phases | None = None
    error: str = ""


@dataclass
class AsShipped:
    """The engine on procurement.rules as it ships, one upkeep between its two phases."""

    system: str
    n: int
    answers: int = 0
    offers: int = 0
    expected_offers: int = 0
    error: str = ""


@dataclass
class Timing:
    system: str
    latency: Latency | None = None
    error: str = ""


@dataclass
class Results:
    facts: list[tuple[str, str]]
    workload: list[str]
    routing: list[Routing] = field(default_factory=list)
    procurement: list[Procurement] = field(default_factory=list)
    shipped: list[AsShipped] = field(default_factory=list)
    latency: list[Timing] = field(default_factory=list)
    profile: str = ""
    notes: list[str] = field(default_factory=list)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _routing_table(rows: list[Routing]) -> list[str]:
    out = [
        "| system | statistics | contender | batch | N | msgs/s (median) | runs (s) |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        runs = ", ".join(f"{s:.2f}" for s in r.seconds) if not r.error else f"error: {r.error}"
        who = "engine" if r.contender == "rules" else "by hand"
        out.append(
            f"| {r.system} | {r.statistics or '-'} | {who} | {r.batch} | {r.n:,} "
            f"| {_rate(r.rate)} | {runs} |"
        )
    return out


def _find(rows: list[Routing], system: str, stats: str, who: str, batch: int) -> Routing | None:
    for r in rows:
        if (r.system, r.statistics, r.contender, r.batch) == (system, stats, who, batch):
            return r
    return None


def _verdict(label: str, num: float | None, den: float | None, need: float) -> str:
    if num is None or den is None:
        return f"- MISS  {label}: no figure"
    ratio = num / den
    verdict = "PASS" if ratio >= need else "MISS"
    return f"- {verdict}  {label}: {num:,.0f} / {den:,.0f} = {ratio:.2f} (need {need:g})"


def _routing_ratios(rows: list[Routing]) -> list[str]:
    out: list[str] = []
    seen = sorted({(r.system, r.statistics) for r in rows}, key=lambda s: (s[0] != "sqlite", s))
    for system, stats in seen:
        where = f"{system}{f' ({stats})' if stats else ''}"
        engines = [
            r for r in rows if (r.system, r.statistics, r.contender) == (system, stats, "rules")
        ]
        for engine in engines:
            b = engine.batch
            same = _find(rows, system, stats, "hand", b)
            one = _find(rows, system, stats, "hand", 1)
            if same is not None:
                out.append(_verdict(f"{where}, B={b}: engine / by hand k={b}", engine.rate,
                                    same.rate, ENGINE_VS_BATCH))  # fmt: skip
            if one is not None:
                out.append(_verdict(f"{where}, B={b}: engine / by hand k=1", engine.rate,
                                    one.rate, ENGINE_VS_ONE))  # fmt: skip
    return out


def _procurement_table(rows: list[Procurement]) -> list[str]:
    out = [
        "| system | contender | batch | requests | fork, checks, 2 answers (s) | supplier (s) "
        "| join of the 3rd answer (s) | requests/s (processing) | requests/s (end to end) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        who = "engine" if r.contender == "rules" else "by hand"
        head = f"| {r.system} | {who} | {r.batch} | {r.n:,} "
        if r.phases is None:
            out.append(head + f"| error: {r.error} | | | | |")
            continue
        p = r.phases
        out.append(
            head + f"| {p.first:.2f} | {p.supplier:.2f} | {p.second:.2f} | {p.rate:,.1f} "
            f"| {p.end_to_end:,.1f} |"
        )
    return out


def _procurement_ratios(rows: list[Procurement]) -> list[str]:
    out = []
    for system in sorted({r.system for r in rows}, key=lambda s: s != "sqlite"):
        mine = [r for r in rows if r.system == system]
        engines = [r for r in mine if r.contender == "rules" and r.phases]
        for engine in engines:
            assert engine.phases is not None
            for k, need in ((engine.batch, ENGINE_VS_BATCH), (1, ENGINE_VS_ONE)):
                hand = next((r for r in mine if r.contender == "hand" and r.batch == k), None)
                rate = hand.phases.rate if hand and hand.phases else None
                out.append(_verdict(f"{system}, B={engine.batch}: engine / by hand k={k}",
                                    engine.phases.rate, rate, need))  # fmt: skip
    return out


def _shipped(rows: list[AsShipped]) -> list[str]:
    out = []
    for r in rows:
        if r.error:
            out.append(f"- {r.system}: error: {r.error}")
            continue
        verdict = "ok" if r.answers == r.n and r.offers == r.expected_offers else "FAILED"
        out.append(
            f"- {verdict}  {r.system}: {r.n} requests, one upkeep (`db.recover()`) between the"
            f" two phases: the customer got {r.answers} answers ({r.offers} offers; expected"
            f" {r.n} answers, {r.expected_offers} offers)"
        )
    return out


def _ms(summary: dict[str, float], key: str) -> str:
    return f"{summary[key] * 1000:.2f}" if key in summary else "-"


def _latency(rows: list[Timing]) -> list[str]:
    out = [
        "| system | path | samples | p50 ms | p90 ms | p99 ms | max ms | lost |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for t in rows:
        if t.latency is None:
            out.append(f"| {t.system} | error: {t.error} | | | | | | |")
            continue
        s = t.latency.summary()
        engine = t.latency.path == "rules engine"
        path = "rules engine: put to the consumer's take" if engine else t.latency.path
        out.append(
            f"| {t.system} | {path} | {len(t.latency.samples)} | {_ms(s, 'p50')} "
            f"| {_ms(s, 'p90')} | {_ms(s, 'p99')} | {_ms(s, 'max')} | {t.latency.lost} |"
        )
        c = t.latency.committed_summary()
        if engine and c:
            out.append(
                f"| {t.system} | rules engine: put to actions committed | "
                f"{len(t.latency.committed)} | {_ms(c, 'p50')} | {_ms(c, 'p90')} "
                f"| {_ms(c, 'p99')} | {_ms(c, 'max')} | {t.latency.lost} |"
            )
            ok = c["p50"] * 1000 <= P50_MS and c["p99"] * 1000 <= P99_MS
            verdicts.append(
                f"- {'PASS' if ok else 'MISS'}  {t.system}, arrival to actions committed: "
                f"p50 {c['p50'] * 1000:.2f} ms (need <= {P50_MS:g}), "
                f"p99 {c['p99'] * 1000:.2f} ms (need <= {P99_MS:g})"
            )
    return [*out, "", *verdicts]


def render(res: Results) -> str:
    """The Markdown report."""
    date = res.facts[0][1][:10] if res.facts else ""
    out = [f"# sluice rules engine benchmark, {date}", "", "## Machine", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in res.facts]
    out += ["", "## Workload", "", *res.workload]
    out += ["", "## 1. Routing: one message in, three out, one computed property", ""]
    out += _routing_table(res.routing)
    out += ["", "Targets: engine >= 2 x by hand with k = B, >= 5 x by hand with k = 1.", ""]
    out += _routing_ratios(res.routing)
    out += ["", "## 2. Procurement (src/sluice/demo/procurement.rules)", ""]
    out += _procurement_table(res.procurement)
    out += ["", "Ratios of requests/s (processing):", ""]
    out += _procurement_ratios(res.procurement)
    out += ["", "The engine on the file as it ships (no core retention on the sliced queues):", ""]
    out += _shipped(res.shipped)
    title = "## 3. Latency, idle system: an order's put() to its actions committed, and taken"
    out += ["", title, ""]
    out += _latency(res.latency)
    if res.notes:
        out += ["", "## Notes", "", *[f"- {n}" for n in res.notes]]
    if res.profile:
        out += ["", "## Profile: the engine's routing run on SQLite (top 25, cumulative)", ""]
        out += ["```", res.profile.rstrip(), "```"]
    out.append("")
    return "\n".join(out)
