"""The cycle benchmark's matrix: each contender in each (batch, synchronous) cell, repeats
interleaved, with the durability each contender really ran with.

Each contender module exposes ``run(path, n, batch, synchronous) -> float`` and ``DRIVE`` (how
it is driven); this module runs them side by side and keeps every run's seconds.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
import statistics
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from bench.harness import one_line

__all__ = [
    "BATCHES",
    "CONTENDERS",
    "PACKAGES",
    "SYNCHRONOUS",
    "Durability",
    "Result",
    "Unsupported",
    "observe",
    "observe_file",
    "run_matrix",
]

BATCHES: tuple[int, ...] = (1, 100)
SYNCHRONOUS: tuple[str, ...] = ("FULL", "NORMAL")

# Display name -> module. The order is the order of the report's rows.
CONTENDERS: dict[str, str] = {
    "raw": "bench.cycle.raw_sqlite",
    "raw-schema": "bench.cycle.raw_schema",
    "sluice": "bench.cycle.sluice_sqlite",
    "huey": "bench.cycle.huey_sqlite",
    "persist-queue": "bench.cycle.persist_queue",
    "litequeue": "bench.cycle.litequeue",
}

# The distributions whose versions the report gives.
PACKAGES = ("sluice", "huey", "persist-queue", "litequeue")

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
            log(f"{name}: import failed: {one_line(exc)}")

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
                        res.error = f"import failed: {one_line(entry)}"
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
            res.error = one_line(exc)
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
