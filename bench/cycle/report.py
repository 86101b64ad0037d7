"""The cycle benchmark's Markdown report: machine, workload, one table per cell, targets."""

from __future__ import annotations

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
    lines: list[str] = []
    for peer, factor in (("raw", 0.7), ("huey", 2.5)):
        for sync in SYNCHRONOUS:
            lines.append(
                _ratio_target(
                    f"batch 1, {sync}: sluice >= {factor} x {peer}",
                    _find(results, "sluice", 1, sync),
                    _find(results, peer, 1, sync),
                    peer,
                    factor,
                )
            )
    sluice = _find(results, "sluice", 100, "FULL")
    label = "batch 100, FULL: sluice >= 30,000 cycles/s"
    if sluice is None or sluice.rate is None:
        why = (sluice.error or sluice.unsupported) if sluice else "not run"
        lines.append(f"- MISS  {label}: sluice has no figure ({why})")
    else:
        verdict = "PASS" if sluice.rate >= 30_000 else "MISS"
        lines.append(f"- {verdict}  {label}: {sluice.rate:,.0f}")
    raw = _find(results, "raw", 100, "FULL")
    lines.append(_ratio_target("batch 100, FULL: sluice >= 0.8 x raw", sluice, raw, "raw", 0.8))
    schema = _find(results, "raw-schema", 100, "FULL")
    if schema is not None and schema.rate and raw is not None and raw.rate:
        # Where the gap lies: sluice's table and indexes, or sluice's Python above them.
        share = f"{sluice.rate / schema.rate:.2f}" if sluice and sluice.rate else "-"
        lines.append(
            f"- (where)  batch 100, FULL: raw statements on sluice's own schema reach"
            f" {schema.rate / raw.rate:.2f} x raw; sluice reaches {share} x that floor"
        )
    return lines


def render_report(
    results: list[Result],
    drives: dict[str, str],
    facts: list[tuple[str, str]],
    repeats: int,
    body_bytes: int,
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
    out += ["", "## Targets", ""]
    out += _targets(results)
    out.append("")
    return "\n".join(out)
