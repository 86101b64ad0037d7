"""The report of ``bench.spark``: what was measured, read rates against Spark's JDBC source,
pipeline rates, and where each streaming query's time went."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field

__all__ = [
    "BROWSE_LABEL",
    "DELETE_LABEL",
    "EXCLUSIVE_LABEL",
    "FLOOR_LABEL",
    "PHASES",
    "PIPELINE_TARGET",
    "POSITION_FLOOR_LABEL",
    "READ_TARGET",
    "ROUNDS_LABEL",
    "SPARK_BATCH_FLOOR_LABEL",
    "SPARK_STREAM_FLOOR_LABEL",
    "SUBSCRIPTION_LABEL",
    "Cell",
    "Run",
    "Settings",
    "render",
]

READ_TARGET = 0.5
"""sluice streaming read >= 0.5 x Spark's JDBC source, msgs/s."""
BROWSE_LABEL = "sluice batch read (browse)"
SUBSCRIPTION_LABEL = "sluice streaming read of a subscription (by position)"
"""A subscription's stream: its topic's rows by id range; the commit moves its pointer."""
EXCLUSIVE_LABEL = "sluice streaming read, exclusive=true (by position)"
"""A queue's stream by id range; the commit deletes the range."""
POSITION_FLOOR_LABEL = "subscription read's statements and Arrow rows alone (no Spark)"
"""A position read's own work from one process: ranges, rows fetched and made Arrow."""
SPARK_BATCH_FLOOR_LABEL = "Python batch source, ready Arrow batches, no database (Spark alone)"
SPARK_STREAM_FLOOR_LABEL = "Python streaming source, ready Arrow batches, no database (Spark alone)"
"""bench.spark.floor: what Spark costs a Python source that has nothing to fetch."""
ROUNDS_LABEL = "sluice streaming read (claimed rounds)"
"""A queue's stream that claims (on PostgreSQL: moves) each round's rows."""
FLOOR_LABEL = "stream statements alone (no Spark)"
"""The read row of the streaming read's SQL run without Spark."""
DELETE_LABEL = "the take's DELETE alone (no output, no Spark)"
"""The read row of removing the rows, nothing else: what any consuming read must do."""
PIPELINE_TARGET = 10_000
"""queue -> Spark SQL -> queue, msgs/s on local[2]."""

PHASES: tuple[tuple[str, str], ...] = (
    ("latestOffset", "sluice plans the next batch (and acknowledges the previous one)"),
    ("getBatch", "Spark builds the batch's DataFrame"),
    ("queryPlanning", "Spark plans the batch"),
    ("walCommit", "Spark writes the offset log"),
    ("addBatch", "read + transform + write + sink commit (publish)"),
    ("commitOffsets", "Spark writes the commit log"),
    ("triggerExecution", "all of one trigger (includes the above)"),
)
"""The ``durationMs`` keys of a streaming query's progress, in the order they happen."""


@dataclass(frozen=True)
class Settings:
    """What the run was asked to do."""

    read_n: int
    pipe_n: int
    read_batches: tuple[int, ...]
    pipe_batches: tuple[int, ...]
    read_partitions: tuple[int, ...]
    backends: tuple[str, ...]
    repeats: int
    warmup_n: int
    body_bytes: int
    body_schema: str
    pipeline_sql: str
    master: str
    quick: bool
    bounds: bool = True
    """With the rows of the claimed rounds' statements and DELETE alone (no Spark)."""
    pipe_exclusive: bool = False
    """Pipelines also with ``exclusive=True`` (the source read by id range)."""
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    """The machine's cores, which every process of a run shares."""


@dataclass
class Run:
    """One measured query: its wall time and, for a stream, its progress summed up."""

    seconds: float
    rows: int | None = None
    batches: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds per ``durationMs`` key, summed over the query's progress entries."""
    before: float | None = None
    """Seconds from the start of the timing to the first trigger."""
    after: float | None = None
    """Seconds from the end of the last trigger to the end of the timing."""
    cpu: float | None = None
    """The machine's busy CPU seconds over the run (Spark, its Python workers, PostgreSQL,
    this process: every core), the run's own checks included (a few milliseconds)."""


@dataclass
class Cell:
    """All repeats of one measurement."""

    part: str  # "read" or "pipeline"
    label: str
    backend: str
    n: int
    batch: int | None = None
    partitions: int | None = None
    runs: list[Run] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def median(self) -> Run | None:
        """The run with the median wall time (the lower one of an even count)."""
        if not self.runs:
            return None
        ordered = sorted(self.runs, key=lambda r: r.seconds)
        return ordered[(len(ordered) - 1) // 2]

    @property
    def rate(self) -> float | None:
        if not self.runs or self.errors:
            return None
        return self.n / statistics.median(r.seconds for r in self.runs)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _mb(cell: Cell, body_bytes: int) -> str:
    rate = cell.rate
    return "-" if rate is None else f"{rate * body_bytes / 1e6:,.1f}"


def _runs(cell: Cell) -> str:
    return ", ".join(f"{r.seconds:.2f}" for r in cell.runs) or "-"


def _busy(cell: Cell) -> str:
    run = cell.median
    return "-" if run is None or run.cpu is None else f"{run.cpu:.2f}"


def _floor_bound(reads: list[Cell], jdbc: Cell | None) -> list[str]:
    """Each streaming read against Spark alone's stream at its max_per_batch: what a Python
    streaming source that fetches nothing reaches, so what no such source can beat."""
    if jdbc is None or jdbc.rate is None:
        return []
    floors = {c.batch: c.rate for c in reads if c.label == SPARK_STREAM_FLOOR_LABEL and c.rate}
    lines = []
    for batch, floor in floors.items():
        factor = floor / jdbc.rate
        verdict = "above" if factor >= READ_TARGET else "below"
        lines.append(
            f"- max_per_batch {batch}: Spark alone {floor:,.0f} msgs/s = {factor:.2f} x JDBC,"
            f" {verdict} the target of {READ_TARGET:g}"
        )
        for c in reads:
            if c.batch == batch and c.label.startswith("sluice streaming") and c.rate:
                lines.append(
                    f"  - {c.label}, partitions {c.partitions}: {c.rate / floor:.2f} of Spark alone"
                )
    if not lines:
        return []
    head = (
        "Spark alone's stream reads ready Arrow batches from a Python source with no database"
        " behind it: no streaming source written in Python, sluice's or any other, can read"
        " faster here. Where it is below the target, the target is out of reach for this"
        " design of source on this machine."
    )
    return ["### The floor of a Python streaming source", "", head, "", *lines, ""]


def _cpu_bound(reads: list[Cell], jdbc: Cell | None, cores: int) -> list[str]:
    """Whether the machine's cores leave room for a stream at the target, from the CPU
    that Spark's streaming machinery (the Spark-alone stream) and the subscription's read
    (no Spark) each used: a stream does both."""
    spark = next((c for c in reads if c.label == SPARK_STREAM_FLOOR_LABEL), None)
    read = next((c for c in reads if c.label == POSITION_FLOOR_LABEL), None)
    jdbc_run, spark_run, read_run = (
        c.median if c is not None else None for c in (jdbc, spark, read)
    )
    if jdbc_run is None or spark_run is None or read_run is None:
        return []
    spark_cpu, read_cpu = spark_run.cpu, read_run.cpu
    if spark_cpu is None or read_cpu is None:
        return []
    allowed = jdbc_run.seconds / READ_TARGET
    budget = allowed * cores
    need = spark_cpu + read_cpu
    text = (
        f"{READ_TARGET:g} x JDBC leaves a stream {allowed:.2f} s (JDBC's median run"
        f" {jdbc_run.seconds:.2f} s / {READ_TARGET:g}): {budget:.2f} CPU seconds of the"
        f" {cores} cores. Spark's streaming machinery with a source that costs nothing"
        f" (Spark alone) used {spark_cpu:.2f}, and the subscription's read without Spark"
        f" (its statements, PostgreSQL's work, the Arrow pages) {read_cpu:.2f}: together"
        f" {need:.2f}, {need / budget:.2f} of the budget."
    )
    if need > budget:
        room = max(budget - spark_cpu, 0.0)
        text += (
            " No overlap of the two meets the target here: the read would have to cost at"
            f" most {room:.2f} CPU seconds, {room / read_cpu:.0%} of what it costs."
        )
    else:
        text += " The target is within the cores' budget; what is left is overlap."
    return ["### The CPU bound of a streaming read on this machine", "", text, ""]


def _status(cell: Cell) -> str:
    return "; ".join(cell.errors) if cell.errors else "ok"


def _facts_table(facts: list[tuple[str, str]]) -> list[str]:
    return ["| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in facts]]


def _workload(s: Settings, durability: list[tuple[str, str]]) -> list[str]:
    return [
        "## Workload",
        "",
        f"- Spark master `{s.master}`, one session for the whole run (built before anything is"
        " timed); a warm-up of every query below on a queue of"
        f" {s.warmup_n:,} messages runs first, so JVM, Python worker and JDBC driver start-up"
        " is not counted.",
        f"- Bodies: JSON objects of {s.body_bytes:,} bytes as `json.dumps` writes them"
        " (`{id, customer, items: [{sku, qty, price}] x 1..5, note: 'x' * pad}`), enqueued"
        " untimed in transactions of 5,000 before each measurement.",
        f"- Body schema of the pipeline: `{s.body_schema}`.",
        f"- Repeats: {s.repeats} per cell; the figure is the median"
        f"{' (QUICK smoke run: figures are indicative only)' if s.quick else ''}."
        " msgs/s = N / wall time; MB/s counts the JSON bodies only.",
        "",
        "Durability (sluice defaults, read back where possible):",
        "",
        *[f"- **{k}**: {v}" for k, v in durability],
        "",
    ]


def _read_section(cells: list[Cell], s: Settings) -> list[str]:
    reads = [c for c in cells if c.part == "read"]
    if not reads:
        return []
    jdbc = next((c for c in reads if c.label.startswith("Spark JDBC")), None)
    out = [
        f"## 1. Reading {s.read_n:,} messages into a DataFrame, PostgreSQL",
        "",
        "Each repeat fills a fresh topic with subscriptions made before the fill, one per"
        " subscription stream below, and runs `VACUUM ANALYZE` on the messages table"
        " (untimed, so the first reader does not pay for hint bits). Spark's JDBC source"
        " reads the topic's rows (the peer, which changes nothing), a sluice batch read"
        " browses them, and each subscription is read by a sluice streaming read: by"
        " position, its topic's rows by id range, acknowledged by moving the subscription's"
        " pointer (the topic's rows stay for collection, untimed). Then each streaming read"
        " of a plain queue gets a fresh queue: with `exclusive=true` by position (id ranges,"
        " acknowledged by deleting the range), and without it by claimed rounds (on"
        " PostgreSQL each round moved into the stream's spool with one `COPY (DELETE ..."
        " RETURNING ...)`). Every query writes to `format('noop')`; its wall time runs from"
        " `load()` to the end of `save()` / `awaitTermination()`; every stream is checked"
        " to have read every message and left nothing (queue empty, subscription without"
        " lag). The JDBC read's `lowerBound`/`upperBound` (min and max id of the rows) are"
        " looked up before its timing starts; the sluice reads find their own bounds inside"
        " theirs. The row of a subscription's read alone runs the position stream's own"
        " work from one Python process without Spark (find each range's end, fetch its rows"
        " in pages and make them Arrow batches, move the pointer), on a subscription of the"
        " same topic: what the stream costs before Spark does anything. The rows of Spark"
        " alone read a Python data source with no database behind it (bench.spark.floor:"
        " Arrow batches of the same schema and body size, built once) into `noop`, as a batch"
        " read and as a stream with the same `max_per_batch`: what any Python source pays"
        " Spark, the floor under sluice's reads."
        + (
            " The last two rows run, without Spark, the claimed rounds' own statements (take,"
            " fetch, acknowledge) and the DELETE inside their take alone: what a read that"
            " removes every row costs before Spark does anything."
            if s.bounds
            else ""
        ),
        "",
        "| reader | max_per_batch | partitions | msgs/s | MB/s | vs JDBC | runs (s)"
        " | busy CPU s | status |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for c in reads:
        ratio = "-"
        if jdbc is not None and c is not jdbc and c.rate is not None and jdbc.rate is not None:
            ratio = f"{c.rate / jdbc.rate:.2f}"
        out.append(
            f"| {c.label} | {c.batch if c.batch else '-'} | {c.partitions or '-'}"
            f" | {_rate(c.rate)} | {_mb(c, s.body_bytes)} | {ratio} | {_runs(c)}"
            f" | {_busy(c)} | {_status(c)} |"
        )
    out += [
        "",
        "busy CPU s: the machine's busy CPU seconds over the median run, every process and"
        f" core counted ({s.cores} cores here); a run cannot end sooner than that divided by"
        " the cores.",
        "",
        f"Targets: sluice streaming read (by position) >= {READ_TARGET:g} x JDBC, and batch"
        f" read (browse) >= {READ_TARGET:g} x JDBC (msgs/s); the claimed rounds are shown for"
        " comparison.",
        "",
    ]
    for c in reads:
        if not c.label.startswith(("sluice streaming", BROWSE_LABEL)):
            continue
        head = f"{c.label}, max_per_batch {c.batch or '-'}, partitions {c.partitions}"
        if c.rate is None or jdbc is None or jdbc.rate is None:
            out.append(f"- MISS  {head}: no figure to compare")
            continue
        factor = c.rate / jdbc.rate
        verdict = "PASS" if factor >= READ_TARGET else "MISS"
        out.append(
            f"- {verdict}  {head}: {c.rate:,.0f} / JDBC {jdbc.rate:,.0f} = {factor:.2f}"
            f" (need {READ_TARGET:g})"
        )
    out.append("")
    out += _floor_bound(reads, jdbc)
    out += _cpu_bound(reads, jdbc, s.cores)
    # Spark alone's stream is the floor under each phase: what Spark's streaming machinery
    # costs a Python source before sluice does anything.
    streams = [
        c
        for c in reads
        if c.label.startswith("sluice streaming") or c.label == SPARK_STREAM_FLOOR_LABEL
    ]
    if streams:
        out += ["### Where a streaming read's time goes (median run)", ""]
        out += _phase_table(streams)
    return out


def _pipeline_section(cells: list[Cell], s: Settings) -> list[str]:
    pipes = [c for c in cells if c.part == "pipeline"]
    if not pipes:
        return []
    out = [
        f"## 2. Pipeline queue -> Spark SQL -> queue, {s.pipe_n:,} messages",
        "",
        "`run_pipeline(spark, url, source='orders', name=..., checkpoint=<fresh dir>,"
        " sql={'billing': SQL}, body_schema=..., max_per_batch=B, once=True)` with",
        "",
        f"```sql\n{s.pipeline_sql}\n```",
        "",
        "Each run starts from a fresh SQLite file (on disk) or fresh queues in the PostgreSQL"
        " schema, filled untimed. msgs/s = N / wall time of `run_pipeline` (its checks, query"
        " start, all micro-batches, termination). Afterwards each run checks that `billing`"
        " holds N messages of the expected shape, that `orders` is empty (nothing ready,"
        " held or pending) and that the query's progress counted N input rows.",
        "",
        "| backend | max_per_batch | msgs/s | MB/s | micro-batches | runs (s) | status |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for c in pipes:
        med = c.median
        batches = str(med.batches) if med else "-"
        out.append(
            f"| {c.backend}{_read_how(c)} | {c.batch}"
            f" | {_rate(c.rate)} | {_mb(c, s.body_bytes)}"
            f" | {batches} | {_runs(c)} | {_status(c)} |"
        )
    out += ["", f"Target: >= {PIPELINE_TARGET:,} msgs/s on 2 cores.", ""]
    for c in pipes:
        head = f"{c.backend}{_read_how(c)}, max_per_batch {c.batch}"
        if c.rate is None:
            out.append(f"- MISS  {head}: no figure ({_status(c)})")
        else:
            verdict = "PASS" if c.rate >= PIPELINE_TARGET else "MISS"
            out.append(f"- {verdict}  {head}: {c.rate:,.0f} msgs/s")
    out += ["", "### Where the pipeline's time goes (median run)", ""]
    out += _phase_table(pipes)
    return out


def _read_how(c: Cell) -> str:
    """How a pipeline cell read its source, beside its backend: nothing for claimed rounds."""
    return " (exclusive)" if "exclusive" in c.label else ""


def _phase_table(cells: list[Cell]) -> list[str]:
    """Seconds and % of wall time per progress phase, one column per cell."""
    shown = [(c, c.median) for c in cells if c.median is not None and c.median.phases]
    if not shown:
        return ["No progress was recorded.", ""]
    heads = [
        f"{c.backend} {c.label.replace('sluice streaming read', 'stream')}, B={c.batch}"
        + (f", p={c.partitions}" if c.partitions else "")
        for c, _ in shown
    ]
    out = [
        "Sums over the query's `recentProgress` of `durationMs` (seconds, % of the wall time)."
        " `latestOffset` includes sluice planning the next batch (claiming a round, or finding"
        " a range's end) and acknowledging the previous one; `addBatch` is read + transform +"
        " write + the sink's commit.",
        "",
        "| phase | " + " | ".join(heads) + " |",
        "|---|" + "---:|" * len(shown),
    ]

    def cell(seconds: float, wall: float) -> str:
        return f"{seconds:.2f} ({seconds / wall * 100:.0f}%)" if wall > 0 else f"{seconds:.2f}"

    for key, meaning in PHASES:
        values = [cell(r.phases.get(key, 0.0), r.seconds) for _, r in shown]
        out.append(f"| {key}: {meaning} | " + " | ".join(values) + " |")
    inside: list[str] = []
    before: list[str] = []
    between: list[str] = []
    after: list[str] = []
    for _, r in shown:
        parts = sum(v for k, v in r.phases.items() if k != "triggerExecution")
        trigger = r.phases.get("triggerExecution", 0.0)
        inside.append(cell(max(trigger - parts, 0.0), r.seconds))
        outside = max(r.seconds - trigger, 0.0)
        if r.before is None or r.after is None:
            before.append("-")
            after.append("-")
            between.append(cell(outside, r.seconds))
        else:
            before.append(cell(r.before, r.seconds))
            after.append(cell(r.after, r.seconds))
            between.append(cell(max(outside - r.before - r.after, 0.0), r.seconds))
    out += [
        "| rest of the triggers (not in a named phase) | " + " | ".join(inside) + " |",
        "| before the first trigger: load, checks, query start, initial offset | "
        + " | ".join(before)
        + " |",
        "| between triggers | " + " | ".join(between) + " |",
        "| after the last trigger: query stop | " + " | ".join(after) + " |",
    ]
    out.append("| wall time | " + " | ".join(f"{r.seconds:.2f}" for _, r in shown) + " |")
    out.append("| triggers with data | " + " | ".join(str(r.batches) for _, r in shown) + " |")
    out.append("")
    return out


def render(
    cells: list[Cell],
    s: Settings,
    facts: list[tuple[str, str]],
    durability: list[tuple[str, str]],
    notes: list[str],
) -> str:
    """The Markdown report."""
    out = [f"# sluice on Spark benchmark, {facts[0][1][:10]}", "", "## Machine", ""]
    out += _facts_table(facts)
    out.append("")
    out += _workload(s, durability)
    out += _read_section(cells, s)
    out += _pipeline_section(cells, s)
    extra = [n for c in cells for n in c.notes]
    if notes or extra:
        out += ["## Notes", "", *[f"- {n}" for n in [*notes, *extra]], ""]
    return "\n".join(out)
