"""The cycle benchmark (enqueue + claim + ack) of sluice against raw SQLite and SQLite-backed
peers: ``python -m bench cycle`` (or ``python -m bench`` alone, or ``python -m bench.cycle``).

The report goes to ``bench/results/cycle-<date>.md`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench.cycle import commit_gap
from bench.cycle.matrix import CONTENDERS, PACKAGES, run_matrix
from bench.cycle.report import render_report
from bench.harness import (
    MEMORY_FS,
    add_common_options,
    body_size,
    filesystem_of,
    machine_facts,
    write_report,
)

# Chosen so the whole default run (5 contenders x 4 cells x 3 repeats) stays under about three
# minutes on the 2-core reference machine. Batch 1 is the expensive part: at FULL every commit
# is an fsync (about 1.7k raw cycles/s), and litequeue and persist-queue slow down as the
# backlog grows (their claims are O(backlog)), so 20,000 there would take about ten minutes.
DEFAULT_N = {1: 5_000, 100: 100_000}
_GAP_COMMITS = 300


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench cycle",
        description="Cycle benchmark (enqueue + claim + ack) of sluice against raw SQLite "
        "and SQLite-backed peers.",
    )
    parser.add_argument(
        "--n",
        type=int,
        help=f"messages per run for every batch size (default: {DEFAULT_N[1]:,} at batch 1, "
        f"{DEFAULT_N[100]:,} at batch 100)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 200 messages per run, 1 repeat"
    )
    add_common_options(
        parser,
        repeats=3,
        repeats_help="runs per cell (median)",
        tmp_dir=Path(tempfile.gettempdir()),
        only=list(CONTENDERS),
        only_help="run only this contender (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.repeats = args.n or 200, 1
    if args.n is not None and args.n < 1:
        parser.error("--n must be positive")
    if args.repeats < 1:
        parser.error("--repeats must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the matrix, print the report and write it; the exit status ignores targets."""
    args = _parse(argv)
    tmp_root: Path = args.tmp_dir.resolve()
    fstype = filesystem_of(tmp_root)[2]
    if fstype in MEMORY_FS:
        print(
            f"{tmp_root} is on {fstype}: fsync costs nothing there; use --tmp-dir on disk",
            file=sys.stderr,
        )
        return 2

    names = args.only or list(CONTENDERS)
    n_for_batch = {b: args.n or default for b, default in DEFAULT_N.items()}
    facts = machine_facts(tmp_root, PACKAGES)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # The disk's latency by the work before a commit, before and after the matrix: the
    # ratios at FULL depend on it (bench/cycle/commit_gap.py).
    log("commit latency by gap (before)")
    commits = 30 if args.quick else _GAP_COMMITS
    gaps = [commit_gap.measure(tmp_root, commits)]
    results, drives = run_matrix(names, n_for_batch, args.repeats, tmp_root, log)
    log("commit latency by gap (after)")
    gaps.append(commit_gap.measure(tmp_root, commits))
    report = render_report(results, drives, facts, args.repeats, body_size(), gaps=gaps)

    write_report("cycle", report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
