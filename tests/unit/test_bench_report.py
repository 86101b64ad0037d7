"""Where a benchmark writes its report: never over one kept from an earlier run."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench.harness import report_path


def test_a_second_report_of_the_day_gets_the_next_letter(tmp_path: Path) -> None:
    today = dt.date.today().isoformat()
    first = report_path("postgres", None, directory=tmp_path)
    assert first == tmp_path / f"postgres-{today}.md"
    first.write_text("kept")
    second = report_path("postgres", None, directory=tmp_path)
    assert second == tmp_path / f"postgres-{today}b.md"
    second.write_text("kept too")
    assert report_path("postgres", None, directory=tmp_path).name == f"postgres-{today}c.md"
    assert first.read_text() == "kept"


def test_out_is_taken_as_given(tmp_path: Path) -> None:
    out = tmp_path / "mine.md"
    out.write_text("old")
    assert report_path("postgres", out, directory=tmp_path) == out
