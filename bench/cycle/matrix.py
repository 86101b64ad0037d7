"""Common machinery of the cycle benchmark: bodies, durability probes, run matrix and report.

Each contender module exposes ``run(path, n, batch, synchronous) -> float`` and ``DRIVE`` (how
it is driven); this module runs them side by side, takes medians and renders the Markdown report.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import TypeVar

__all__ = [
    "BATCHES",
    "CONTENDERS",
    "SYNCHRONOUS",
    "Durability",
    "Result",
    "Unsupported",
    "body_size",
    "chunks",
    "encode",
    "filesystem_of",
    "machine_facts",
    "make_bodies",
    "observe",
    "observe_file",
    "render_report",
    "run_matrix",
    "write_report",
]

BATCHES: tuple[int, ...] = (1, 100)
SYNCHRONOUS: tuple[str, ...] = ("FULL", "NORMAL")

# Display name -> module. The order is the order of the report's rows.
CONTENDERS: dict[str, str] = {
    "raw": "bench.raw_sqlite",
    "raw-schema": "bench.raw_schema",
    "sluice": "bench.sluice_sqlite",
    "huey": "bench.huey_sqlite",
    "persist-queue": "bench.persist_queue",
    "litequeue": "bench.litequeue",
}

# Peers whose distribution version is worth printing in the report.
_DISTRIBUTIONS: dict[str, str] = {
    "sluice": "sluice",
    "huey": "huey",
    "persist-queue": "persist-queue",
    "litequeue": "litequeue",
}

T = TypeVar("T")

_SYNC_NAMES: dict[int, str] = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


class Unsupported(Exception):
    """The peer does not offer this combination (for example no batch API)."""


@dataclass(frozen=True)
class Durability:
    """What a contender actually ran with, read back from its connection where possible."""

    journal_mode: str
    synchronous: str
    note: str = ""

    def __str__(self) -> str:
        text = f"{self.journal_mode.upper()}, {self.synchronous}"
        return f"{text} ({self.note})" if self.note else text


# The durability recorded by the contender during its current run. A contender reports it
# from inside run() because synchronous is a per-connection setting: only the peer's own
# live connection can tell what it used, and run() must keep its plain float signature.
_observed: list[Durability] = []


def observe(conn: sqlite3.Connection, note: str = "") -> None:
    """Record the journal mode and synchronous level of a peer's live connection."""
    journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    _observed.append(Durability(journal, _SYNC_NAMES.get(level, str(level)), note))


def observe_file(db_file: Path, synchronous: str, note: str) -> None:
    """Record durability for a contender whose connection is not reachable.

    The journal mode is persistent in the file (WAL), so it is read back after the contender
    closed; synchronous is per connection and can only be reported as requested.
    """
    conn = sqlite3.connect(db_file)
    try:
        journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()
    _observed.append(Durability(journal, synchronous, note))


def make_bodies(n: int) -> list[dict[str, object]]:
    """N small JSON objects of about 100 bytes once encoded, built before timing starts."""
    return [
        {
            "n": i,
            "kind": "order.created",
            "customer": f"cust-{i % 9973:05d}",
            "amount_cents": (i * 7919) % 100_000,
            "currency": "EUR",
        }
        for i in range(n)
    ]


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """Split items into consecutive slices of at most size elements."""
    return [items[i : i + size] for i in range(0, len(items), size)]


RunFn = Callable[[Path, int, int, str], float]


@dataclass
class Result:
    """All repeats of one contender in one (batch, synchronous) cell."""

    contender: str
    batch: int
    synchronous: str
    n: int
    seconds: list[float] = field(default_factory=list)
    durability: Durability | None = None
    unsupported: str = ""
    error: str = ""

    @property
    def rate(self) -> float | None:
        """Cycles per second from the median run, or None when there is no measurement."""
        if self.error or self.unsupported or not self.seconds:
            return None
        return self.n / statistics.median(self.seconds)


def _load(module_name: str) -> tuple[RunFn, str]:
    module: ModuleType = importlib.import_module(module_name)
    run: RunFn = module.run
    drive: str = getattr(module, "DRIVE", "")
    return run, drive


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace("|", "/")
    return text if len(text) <= 160 else text[:157] + "..."


def run_matrix(
    names: Sequence[str],
    n_for_batch: dict[int, int],
    repeats: int,
    tmp_root: Path,
    log: Callable[[str], None],
) -> tuple[list[Result], dict[str, str]]:
    """Run every contender in every (batch, synchronous) cell; return results and drive notes.

    Repeats are interleaved across contenders (r1 of all, then r2 of all, ...) so that drift
    in the machine's state spreads over everyone instead of landing on one contender.
    """
    loaded: dict[str, RunFn | BaseException] = {}
    drives: dict[str, str] = {}
    for name in names:
        try:
            loaded[name], drives[name] = _load(CONTENDERS[name])
        except Exception as exc:  # a contender that cannot import is reported, not fatal
            loaded[name] = exc
            drives[name] = ""
            log(f"{name}: import failed: {_one_line(exc)}")

    results: list[Result] = []
    for batch in BATCHES:
        n = n_for_batch[batch]
        for sync in SYNCHRONOUS:
            cell = {name: Result(name, batch, sync, n) for name in names}
            results.extend(cell.values())
            for rep in range(repeats):
                for name in names:
                    res = cell[name]
                    if res.error or res.unsupported:
                        continue
                    entry = loaded[name]
                    if isinstance(entry, BaseException):
                        res.error = f"import failed: {_one_line(entry)}"
                        continue
                    _run_once(entry, res, tmp_root)
                    log(_progress(res, rep, repeats))
    return results, drives


def _run_once(run: RunFn, res: Result, tmp_root: Path) -> None:
    _observed.clear()
    with tempfile.TemporaryDirectory(prefix=f"bench-{res.contender}-", dir=tmp_root) as tmp:
        try:
            seconds = run(Path(tmp), res.n, res.batch, res.synchronous)
        except Unsupported as exc:
            res.unsupported = str(exc) or "not offered"
            return
        except Exception as exc:  # report the failure in the table and go on with the rest
            res.error = _one_line(exc)
            if os.environ.get("BENCH_TRACEBACK"):
                traceback.print_exc(file=sys.stderr)
            return
    res.seconds.append(seconds)
    if _observed:
        res.durability = _observed[-1]


def _progress(res: Result, rep: int, repeats: int) -> str:
    head = f"batch {res.batch:>3} {res.synchronous:<6} {res.contender:<14} run {rep + 1}/{repeats}"
    if res.error:
        return f"{head}: error: {res.error}"
    if res.unsupported:
        return f"{head}: unsupported: {res.unsupported}"
    return f"{head}: {res.n / res.seconds[-1]:>10,.0f} cycles/s"


# ---------------------------------------------------------------- machine facts


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                kib = int(line.split()[1])
                return f"{kib / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def filesystem_of(path: Path) -> tuple[str, str, str]:
    """(device, mount point, filesystem type) of the mount holding path, from /proc/mounts."""
    real = os.path.realpath(path)
    best = ("unknown", "", "unknown")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        device, mount, fstype = parts[0], parts[1], parts[2]
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        # The longest matching mount point wins; later lines shadow earlier ones on a tie.
        if inside and len(mount) >= len(best[1]):
            best = (device, mount, fstype)
    return best


def machine_facts(tmp_root: Path) -> list[tuple[str, str]]:
    """Facts that let a reader compare this report with another machine's."""
    device, mount, fstype = filesystem_of(tmp_root)
    versions = []
    for label, dist in _DISTRIBUTIONS.items():
        try:
            versions.append(f"{label} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{label} not installed")
    return [
        ("Date", dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")),
        ("CPU", _cpu_model()),
        ("Cores", str(os.cpu_count())),
        ("RAM", _ram()),
        ("Kernel", f"{platform.system()} {platform.release()}"),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("SQLite library", sqlite3.sqlite_version),
        ("Temp dir", f"{tmp_root} on {device} ({fstype}, mounted at {mount})"),
        ("Packages", ", ".join(versions)),
    ]


# ---------------------------------------------------------------- report


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
    out += ["| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in facts]
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


def encode(body: dict[str, object]) -> str:
    """The JSON text contenders that store text or bytes are given (json.dumps defaults)."""
    return json.dumps(body)


def body_size() -> int:
    """Encoded size of a typical body, for the report."""
    return len(encode(make_bodies(20_000)[12_345]))


def write_report(kind: str, report: str, out: Path | None) -> None:
    """Print a report and write it, by default to bench/results/<kind>-<date>.md."""
    path = out or Path(__file__).resolve().parent / "results" / (
        f"{kind}-{dt.date.today().isoformat()}.md"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report)
    print(report)
    print(f"report written to {path}", file=sys.stderr)
