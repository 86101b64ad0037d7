"""Command line entry point: ``python -m bench`` runs the cycle benchmark and writes the report.

The report goes to ``bench/results/cycle-<date>.md`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench.harness import (
    CONTENDERS,
    body_size,
    filesystem_of,
    machine_facts,
    render_report,
    run_matrix,
    write_report,
)

# Chosen so the whole default run (5 contenders x 4 cells x 3 repeats) stays under about three
# minutes on the 2-core reference machine. Batch 1 is the expensive part: at FULL every commit
# is an fsync (about 1.7k raw cycles/s), and litequeue and persist-queue slow down as the
# backlog grows (their claims are O(backlog)), so 20,000 there would take about ten minutes.
DEFAULT_N = {1: 5_000, 100: 100_000}

# File systems whose numbers say nothing about durability: fsync there is free.
_MEMORY_FS = {"tmpfs", "ramfs"}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
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
        "--only",
        metavar="NAME",
        action="append",
        choices=list(CONTENDERS),
        help="run only this contender (repeatable)",
    )
    parser.add_argument("--out", type=Path, help="report path (default: bench/results/...)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (median)")
    parser.add_argument(
        "--tmp-dir",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="where the fresh per-run directories are made; must be on disk, not tmpfs",
    )
    args = parser.parse_args(argv)
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
    if fstype in _MEMORY_FS:
        print(
            f"{tmp_root} is on {fstype}: fsync costs nothing there; use --tmp-dir on disk",
            file=sys.stderr,
        )
        return 2

    names = args.only or list(CONTENDERS)
    n_for_batch = {b: args.n or default for b, default in DEFAULT_N.items()}
    facts = machine_facts(tmp_root)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results, drives = run_matrix(names, n_for_batch, args.repeats, tmp_root, log)
    report = render_report(results, drives, facts, args.repeats, body_size())

    write_report("cycle", report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
