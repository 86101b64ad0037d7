"""The report of ``bench.content``: latency and throughput tables, ratios against the
targets and the plain-queue alternative, and the query plans seen."""

from __future__ import annotations

from collections.abc import Sequence

from bench.content.workload import (
    CUSTOMERS,
    PLAIN_QUEUE,
    PRIORITY,
    PROPERTY,
    QUEUE,
    REGIONS,
    TARGET_P50_MS,
    TARGET_PRIORITY_COST,
    THROUGHPUT,
    TYPE,
    BackendRun,
    Settings,
    body_size,
)
from bench.harness import summarize

# ------------------------------------------------------------------------------ report


def _ms(value: float) -> str:
    return f"{value * 1000:,.2f}"


def _row(label: str, samples: Sequence[float], target: str = "", note: str = "") -> str:
    st = summarize(samples)
    if not st:
        return f"| {label} | 0 | - | - | - | - | {target} | {note} |"
    return (
        f"| {label} | {int(st['n']):,} | {_ms(st['p50'])} | {_ms(st['p90'])} | {_ms(st['p99'])}"
        f" | {_ms(st['max'])} | {target} | {note} |"
    )


def _verdict(p50: float | None, limit_ms: float) -> str:
    if p50 is None:
        return "-"
    return f"{'PASS' if p50 * 1000 <= limit_ms else 'MISS'} (p50 <= {limit_ms:g} ms)"


def _p50(samples: Sequence[float]) -> float | None:
    st = summarize(samples)
    return st["p50"] if st else None


def render_backend(run: BackendRun, s: Settings) -> list[str]:
    title = "SQLite" if run.backend == "sqlite" else "PostgreSQL"
    out = [f"## {title}", ""]
    if run.error:
        out += [f"**Run failed:** {run.error}", ""]
    out += _render_setup(run, s)
    out += _render_latency(run, s)
    lines, rates = _render_throughput(run, s)
    out += lines
    out += ["", "### Ratios and targets", ""]
    out += _ratios(run, rates)
    if run.problems:
        out += ["", "### Problems seen", ""]
        out += [f"- {p}" for p in run.problems]
    out += _render_plans(run)
    if run.notes:
        out += ["", "### Notes", ""]
        out += [f"- {n}" for n in run.notes]
    out.append("")
    return out


def _render_setup(run: BackendRun, s: Settings) -> list[str]:
    out = ["| | |", "|---|---|", f"| URL | `{run.url}` |"]
    if run.storage:
        out.append(f"| Storage | {run.storage} |")
    out.append(f"| Durability | {run.durability or '-'} |")
    out.append(
        f"| N | {run.n:,} orders in `{QUEUE}` (JPMQ {TYPE}, priority `{PRIORITY}`, property"
        f" `customer` = `{PROPERTY[1]}`); {run.plain_n:,} in `{PLAIN_QUEUE}` (untyped) |"
    )
    out.append(f"| Load batch | put_many batches of {s.load_batch:,}, one transaction each |")
    for what, count, took in run.load:
        rate = f"{count / took:,.0f} msgs/s" if took > 0 else "-"
        out.append(f"| Load: {what} | {count:,} in {took:,.1f} s = {rate} |")
    phases = "; ".join(
        f"{name}: {took:,.1f} s (load average {before:.1f} -> {after:.1f})"
        for name, took, before, after in run.phases
    )
    out.append(f"| Phases | {phases} |")
    return out


def _render_latency(run: BackendRun, s: Settings) -> list[str]:
    out = ["", "### Dequeue latency (ms; dequeue + commit, each its own transaction)", ""]
    out += [
        "| selection (limit 1, consumed) | samples | p50 | p90 | p99 | max | target | notes |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    declared = [(run.selective, ""), (run.ordered, "")]
    declared += [(again, ", after `ANALYZE`") for again in run.analyzed]
    for timed, when in declared:
        label = "`customer = '<c>'`" + (
            ", `order_by=['body.total DESC']`" if "order_by" in timed.label else ""
        )
        target = _verdict(_p50(timed.samples), TARGET_P50_MS)
        out.append(_row(f"{label}{when}", timed.samples, target, timed.note))
        out.append(_row("&nbsp;&nbsp;the `tx.dequeue` call alone", timed.claim))
    for scan in run.scans:
        out.append(_row(f"`{scan.label}` (undeclared path)", scan.samples, "", scan.note))
    alt = run.alternative
    scanned = sorted(alt.scanned)
    alt_note = ""
    if scanned:
        alt_note = (
            f"messages scanned per match: median {scanned[len(scanned) // 2]:,}, mean"
            f" {sum(scanned) / len(scanned):,.0f}, max {scanned[-1]:,}"
        )
    alt_note = "; ".join(x for x in (alt_note, alt.note) if x)
    label = (
        f"plain-queue alternative: dequeue batches of {s.alt_batch} in one transaction,"
        " test in Python, re-enqueue the others"
    )
    out.append(_row(label, alt.samples, "", alt_note))
    return out


def _render_throughput(run: BackendRun, s: Settings) -> tuple[list[str], dict[str, float]]:
    out = ["", "### Enqueue throughput", ""]
    out += [
        f"put_many batches of {s.throughput_batch} (one transaction each) into fresh queues in"
        f" the same database, {s.throughput_n:,} messages per queue, the queues interleaved in"
        f" rounds of {max(1, 5_000 // s.throughput_batch) * s.throughput_batch:,} messages.",
        "",
        "| queue | msgs/s | µs per message | vs the same queue without priority function |",
        "|---|---:|---:|---:|",
    ]
    rates = {label: n / took for label, (n, took) in run.throughput.items() if took > 0}
    pairs = {THROUGHPUT[0][0]: THROUGHPUT[1][0], THROUGHPUT[2][0]: THROUGHPUT[3][0]}
    for label, per_s in rates.items():
        base = pairs.get(label)
        vs = f"{per_s / rates[base]:.2f}" if base is not None and base in rates else "1.00"
        out.append(f"| {label} | {per_s:,.0f} | {1e6 / per_s:,.1f} | {vs} |")
    return out, rates


def _render_plans(run: BackendRun) -> list[str]:
    out: list[str] = []
    if run.surveys:
        out += ["", "### Index used by the claim for `customer = '<c>'`", ""]
        out += [
            "EXPLAIN of sluice's claim statement for 50 random customers: how many plans read"
            " each index (PostgreSQL: partition by partition; `t1` is the property's slot).",
            "",
            "| when | plans | index: plans that read it |",
            "|---|---:|---|",
        ]
        for when, counts, total in run.surveys:
            used = ", ".join(f"`{index}`: {n}" for index, n in counts.items()) or "-"
            out.append(f"| {when} | {total} | {used} |")
    if run.pg_states:
        out += ["", "### Server state after each phase", ""]
        out += ["| after | state |", "|---|---|"]
        out += [f"| {name} | {state} |" for name, state in run.pg_states]
    if run.executed_plans:
        out += ["", "### Claim statements executed (EXPLAIN ANALYZE, rolled back)", ""]
        for label, lines in run.executed_plans:
            out += [f"`{label}`:", "", "```", *lines, "```", ""]
    if run.plans:
        out += ["", "### Plans of sluice's claim statement (limit 1), after loading", ""]
        for label, lines in run.plans:
            out += [f"`{label}`:", "", "```", *lines, "```", ""]
    return out


def _ratios(run: BackendRun, rates: dict[str, float]) -> list[str]:
    lines: list[str] = []
    sel = _p50(run.selective.samples)
    alt = _p50(run.alternative.samples)
    scanned = run.alternative.scanned
    if sel and alt and scanned:
        mean_scanned = sum(scanned) / len(scanned)
        per_message = sum(run.alternative.samples) / sum(scanned)
        lines.append(
            f"- selective dequeue vs the plain-queue alternative (p50, same kind of customers):"
            f" {_ms(alt)} ms / {_ms(sel)} ms = **{alt / sel:,.0f}x** slower without selective"
            f" dequeue; the alternative costs {per_message * 1e6:,.1f} µs per message scanned"
            f" (mean {mean_scanned:,.0f} scanned per match), so even a customer found after"
            f" {sel / per_message:,.0f} messages would cost as much as the declared-property"
            " dequeue."
        )
        if run.plain_n < run.n:
            expected = run.n / (run.n / CUSTOMERS + 1)
            lines.append(
                f"- the alternative ran on {run.plain_n:,} messages, not {run.n:,}: at {run.n:,}"
                f" a customer's first message is expected after ~{expected:,.0f} messages, i.e."
                f" ~{expected * per_message * 1000:,.0f} ms (extrapolated)."
            )
        else:
            lines.append(f"- observed on the full queue of {run.plain_n:,} messages.")
    typed, untyped = THROUGHPUT[0][0], THROUGHPUT[1][0]
    if typed in rates and untyped in rates:
        cost = 1 - rates[typed] / rates[untyped]
        verdict = "PASS" if cost <= TARGET_PRIORITY_COST else "MISS"
        lines.append(
            f"- {verdict}  priority-function overhead on the type-checked queue: 1 -"
            f" {rates[typed]:,.0f} / {rates[untyped]:,.0f} = **{cost:.1%}** of throughput"
            f" (target <= {TARGET_PRIORITY_COST:.0%})."
        )
    ref_p, ref = THROUGHPUT[2][0], THROUGHPUT[3][0]
    if ref_p in rates and ref in rates:
        cost = 1 - rates[ref_p] / rates[ref]
        per = 1e6 / rates[ref_p] - 1e6 / rates[ref]
        lines.append(
            f"- for reference, on an untyped queue (no type check to hide it) the priority"
            f" function costs {cost:.1%} of throughput, {per:,.1f} µs per message."
        )
    if typed in rates and ref_p in rates:
        per = 1e6 / rates[typed] - 1e6 / rates[ref_p]
        lines.append(
            f"- the type check (JSON Schema of the JPMQ type) costs {per:,.0f} µs per message:"
            f" {rates[ref_p] / rates[typed]:,.1f}x the enqueue time of the same queue untyped."
        )
    return lines


def render(runs: list[BackendRun], s: Settings, facts: list[tuple[str, str]]) -> str:
    out = [f"# sluice content-aware queuing at scale, {facts[0][1]}", "", "## Machine", ""]
    out += ["| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in facts]
    out += [
        "",
        "## Workload",
        "",
        f"Orders of JPMQ's `{TYPE}` type (the type of `sluice demo`): id, date, 1-3 lines of"
        " line_no, amout, price and 1-2 items (id, name, ean), plus `customer.name` (one of"
        f" {CUSTOMERS:,}, uniformly drawn, one of them `Smith`), `region` (one of"
        f" {len(REGIONS)}) and `total`; {body_size(s.seed):,} bytes of JSON on average."
        f" Queue `{QUEUE}`: `create_queue('{QUEUE}', types=['{TYPE}'],"
        f" priority={{'{TYPE}': '{PRIORITY}'}})` and `create_property('customer',"
        f" '{PROPERTY[1]}', queues=['{QUEUE}'])`."
        + _load_text(s)
        + " Measured in this order: items 1, 2, 4, 3 (PostgreSQL: item 1 once more after"
        " `ANALYZE`, since autovacuum may be off and then the planner has no statistics).",
        "",
        f"1. Selective dequeue: {s.samples:,} transactions `with db.transaction() as tx:"
        " tx.dequeue('orders', where=\"customer = '<c>'\", limit=1)`, committed on exit (the"
        " message is consumed); customers drawn with the weight of their share of the queue"
        " (Smith first); latency from entering the transaction to the end of its commit, and the"
        f" `tx.dequeue` call alone. Then {s.samples:,} more with `order_by=['body.total DESC']`"
        " (checked: the answer is the customer's order with the highest total).",
        f"2. Undeclared JSON paths, evaluated by the database row by row in delivery order: up"
        f" to {max(s.scan_samples, 50)} samples of `body.region = 'north'` (a quarter of the"
        f" orders) and up to {s.scan_samples} of `body.id = <a random remaining id>` (one"
        f" order; the scan reads half the queue on average; at most {s.scan_budget:g} s).",
        f"3. Enqueue throughput into fresh queues: {s.throughput_n:,} orders each in put_many"
        f" batches of {s.throughput_batch}.",
        f"4. The plain-queue alternative, on `{PLAIN_QUEUE}` (untyped, nothing declared, the same"
        f" orders): for up to {s.alt_samples} of item 1's customers (at most {s.alt_budget:g} s),"
        " one transaction that dequeues batches of"
        f" {s.alt_batch} in delivery order, tests `body['customer']['name']` in Python, keeps"
        " the match and re-enqueues all the others (`enqueue_many` before the commit), then"
        " commits. Re-enqueued messages lose their place (they go to the tail) and their ids.",
        "",
    ]
    for run in runs:
        out += render_backend(run, s)
    return "\n".join(out)


def _load_text(s: Settings) -> str:
    if s.typed_load >= s.n:
        return " Every order is loaded through the type check."
    return (
        f" The first {s.typed_load:,} orders are loaded type-checked (their rate is the typed"
        " loading throughput); the rest with the queue's type check switched off by"
        " `alter_queue` (types=[], priority={'*': ...}) and back on afterwards: their priority"
        " and property are computed by sluice as for the others, but they are stored without a"
        " type name."
    )
