"""The cycle benchmark's Markdown report: machine, workload, one table per cell, targets."""

from __future__ import annotations

from bench.cycle.commit_gap import GapLatency
from bench.cycle.matrix import BATCHES, SYNCHRONOUS, Result
from bench.harness import facts_table

__all__ = ["render_report"]


def _fmt_rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


def _ratio(res: Result, ref: Result | None) -> str:
    if ref is None or res.rate is None or ref.rate is None:
        return "-"
    text = f"{res.rate / ref.rate:.2f}"
    same = (
        res.durability is not None
        and ref.durability is not None
        and res.durability.synchronous == ref.durability.synchronous
    )
    return text if same else f"{text} (unequal durability)"


def _cell_table(cell: list[Result]) -> list[str]:
    by_name = {r.contender: r for r in cell}
    raw, huey = by_name.get("raw"), by_name.get("huey")
    lines = [
        "| contender | durability used | cycles/s | vs raw | vs huey |",
        "|---|---|---:|---:|---:|",
    ]
    for res in cell:
        if res.error:
            lines.append(f"| {res.contender} | - | error: {res.error} | - | - |")
        elif res.unsupported:
            lines.append(f"| {res.contender} | - | unsupported: {res.unsupported} | - | - |")
        else:
            dur = str(res.durability) if res.durability else "not reported"
            lines.append(
                f"| {res.contender} | {dur} | {_fmt_rate(res.rate)} "
                f"| {_ratio(res, raw)} | {_ratio(res, huey)} |"
            )
    return lines


def _find(results: list[Result], name: str, batch: int, sync: str) -> Result | None:
    for res in results:
        if (res.contender, res.batch, res.synchronous) == (name, batch, sync):
            return res
    return None


def _ratio_target(
    label: str, sluice: Result | None, ref: Result | None, ref_name: str, factor: float
) -> str:
    if sluice is None or sluice.rate is None:
        why = (sluice.error or sluice.unsupported) if sluice else "not run"
        return f"- MISS  {label}: sluice has no figure ({why})"
    if ref is None or ref.rate is None:
        return f"- MISS  {label}: {ref_name} has no figure to compare with"
    ratio = sluice.rate / ref.rate
    verdict = "PASS" if ratio >= factor else "MISS"
    text = (
        f"- {verdict}  {label}: sluice {sluice.rate:,.0f} / {ref_name} {ref.rate:,.0f}"
        f" = {ratio:.2f} (need {factor:g})"
    )
    if (
        ref.durability
        and sluice.durability
        and (ref.durability.synchronous != sluice.durability.synchronous)
    ):
        text += (
            f"; unequal durability: {ref_name} ran {ref.durability.synchronous},"
            f" sluice {sluice.durability.synchronous}"
        )
    return text


def _targets(results: list[Result]) -> list[str]:
    """Issue 44's targets for this benchmark, and where the batch-100 gap lies."""
    lines: list[str] = []
    batch1 = _find(results, "sluice", 1, "FULL")
    for peer, factor in (("raw", 1.3), ("huey", 1.2)):
        label = f"batch 1, FULL: sluice >= {factor} x {peer}"
        lines.append(_ratio_target(label, batch1, _find(results, peer, 1, "FULL"), peer, factor))
    sluice = _find(results, "sluice", 100, "FULL")
    raw = _find(results, "raw", 100, "FULL")
    lines.append(_ratio_target("batch 100, FULL: sluice >= 0.6 x raw", sluice, raw, "raw", 0.6))
    schema = _find(results, "raw-schema", 100, "FULL")
    if schema is not None and schema.rate and raw is not None and raw.rate:
        # Where the gap lies: sluice's table and indexes, or sluice's Python above them.
        share = f"{sluice.rate / schema.rate:.2f}" if sluice and sluice.rate else "-"
        lines.append(
            f"- (where)  batch 100, FULL: raw statements on sluice's own schema reach"
            f" {schema.rate / raw.rate:.2f} x raw; sluice reaches {share} x that floor"
        )
    normal = _find(results, "sluice", 1, "NORMAL")
    huey = _find(results, "huey", 1, "FULL")
    if normal and normal.rate and huey and huey.rate:
        # The bound: NORMAL syncs nothing at a commit, so sluice's cycle there is its work
        # alone. Reaching 1.2 x huey at FULL needs that work to leave room for two fsyncs.
        lines.append(
            f"- (bound)  batch 1: sluice with no fsync at any commit (NORMAL) makes"
            f" {normal.rate:,.0f} cycles/s = {normal.rate / huey.rate:.2f} x huey at FULL;"
            f" {1e6 / normal.rate:.0f} µs of work per cycle against"
            f" {1e6 / (1.2 * huey.rate):.0f} µs for the whole cycle at 1.2 x huey"
        )
    return lines


def _gap_section(gaps: list[list[GapLatency]]) -> list[str]:
    """The commit-latency-by-gap tables measured before and after the matrix."""
    if not gaps:
        return []
    out = [
        "",
        "## Durable commit latency by the work before it (this machine, this run)",
        "",
        "One SQLite WAL connection at FULL, one single-row INSERT per commit, after a spin of"
        " the given length (bench/cycle/commit_gap.py), measured before and after the matrix."
        " Where a short gap gives a short commit and a longer one a long commit, a contender"
        " whose own work between two commits exceeds the knee pays the long latency at every"
        " fsync: compare with each contender's NORMAL figures (their work per cycle).",
        "",
        "| busy work before the commit (µs) | "
        + " | ".join(f"median ms ({label})" for label in ("before", "after")[: len(gaps)])
        + " |",
        "|---:|" + "---:|" * len(gaps),
    ]
    for rows in zip(*gaps, strict=True):
        out.append(f"| {rows[0].gap_us} | " + " | ".join(f"{r.median_ms:.3f}" for r in rows) + " |")
    return out


def render_report(
    results: list[Result],
    drives: dict[str, str],
    facts: list[tuple[str, str]],
    repeats: int,
    body_bytes: int,
    *,
    gaps: list[list[GapLatency]] | None = None,
) -> str:
    """The Markdown report: machine, workload, one table per cell, targets."""
    out = [f"# sluice cycle benchmark, {facts[0][1][:10]}", "", "## Machine", ""]
    out += facts_table(facts)
    out += [
        "",
        "## Workload",
        "",
        "One cycle = enqueue + claim + acknowledge of one message. Phase 1 enqueues N messages;"
        " phase 2 claims and acknowledges until the queue is empty. Batch 1 = one message per"
        " transaction; batch 100 = 100 messages per enqueue transaction and per claim/ack."
        f" Body: a JSON object of {body_bytes} bytes. cycles/s = N / (phase 1 + phase 2 seconds),"
        f" median of {repeats} runs, each in a fresh directory and a fresh database. Setup (open,"
        " schema) and close are not timed. After timing, every run checks that it got N messages"
        " back and that none is left unacknowledged.",
        "",
        "How each contender is driven:",
        "",
    ]
    out += [f"- **{name}**: {drive}" for name, drive in drives.items() if drive]
    for batch in BATCHES:
        for sync in SYNCHRONOUS:
            cell = [r for r in results if r.batch == batch and r.synchronous == sync]
            if not cell:
                continue
            out += ["", f"## batch {batch}, synchronous {sync} (N = {cell[0].n:,})", ""]
            out += _cell_table(cell)
    out += _gap_section(gaps or [])
    out += ["", "## Targets (issue 44)", ""]
    out += _targets(results)
    out.append("")
    return "\n".join(out)
