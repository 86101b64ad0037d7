"""What every report shares: errors as one table-safe line, the facts table, and where the
report is written (bench/results/<kind>-<date>.md unless ``--out`` says otherwise)."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["RESULTS", "facts_table", "one_line", "report_path", "write_report"]

RESULTS = Path(__file__).resolve().parents[1] / "results"
"""bench/results/: every report's default directory."""


def one_line(exc: BaseException) -> str:
    """An exception as one short line that fits in a Markdown table cell."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace("|", "/")
    return text if len(text) <= 200 else text[:197] + "..."


def facts_table(facts: Sequence[tuple[str, str]]) -> list[str]:
    """The machine's facts as a two-column Markdown table, one line per fact."""
    return ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in facts)]


def report_path(kind: str, out: Path | None, *, directory: Path = RESULTS) -> Path:
    """``out``, or bench/results/<kind>-<today>.md; if today's is there already (a report
    kept from an earlier run), <kind>-<today>b.md, then c, and so on: never over it."""
    if out is not None:
        return out
    stem = f"{kind}-{dt.date.today().isoformat()}"
    for suffix in ("", *"bcdefghijklmnopqrstuvwxyz"):
        path = directory / f"{stem}{suffix}.md"
        if not path.exists():
            return path
    raise FileExistsError(f"26 reports named {stem}*.md in {directory}: pass --out")


def write_report(kind: str, report: str, out: Path | None) -> None:
    """Print a report and write it, by default to bench/results/<kind>-<date>.md."""
    path = report_path(kind, out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report)
    print(report)
    print(f"report written to {path}", file=sys.stderr)
