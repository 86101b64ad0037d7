"""What each part of sluice's SQLite schema costs the batch cycle, against raw, in one run.

The cycle benchmark's ``raw-schema`` contender drives sluice's own table with raw statements;
here the same driver runs with parts of the schema taken away one at a time (the partial
indexes, the fifth column of the delivery index, the expiry test, the wide RETURNING)
and all at once ("lean"), and with a delivery index of ready messages only, interleaved
with raw in each round. It says how far a narrower schema
could move sluice towards raw, and what each feature's share is.

    python -m bench schema-cost [--quick] [--n 100000] [--repeats 3] [--synchronous FULL]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.cycle import raw_schema, raw_sqlite
from bench.cycle.matrix import PACKAGES
from bench.harness import add_common_options, facts_table, machine_facts, write_report

_PARTIAL = (
    "messages_pending",
    "messages_settled",
    "messages_expiring",
    "messages_lane",
    "messages_tasks",
)
_NARROW = "(queue_id, state, priority DESC, id)"
_READY = "(queue_id, priority DESC, id, available_at) WHERE state = 1"
_ID_BODY = " RETURNING id, body"

# Label -> (what is taken away, variant). None is raw itself.
_VARIANTS: dict[str, tuple[str, raw_schema.Variant | None]] = {
    "raw": ("bench.cycle.raw_sqlite: 3 columns, one index", None),
    "sluice schema": ("as sluice makes it (bench.cycle.raw_schema)", raw_schema.SLUICE),
    "no partial indexes": (
        "pending, settled, expiring, lane and task-order indexes dropped",
        raw_schema.Variant(drop=_PARTIAL),
    ),
    "4-column index": (
        "delivery index without available_at (delay no longer read from the index)",
        raw_schema.Variant(index=_NARROW),
    ),
    "no expiry test": (
        "claim without `expires_at IS NULL OR expires_at > ?`",
        raw_schema.Variant(expiry=False),
    ),
    "RETURNING id, body": (
        "claim returns 2 columns, not the 19 a Message is built from",
        raw_schema.Variant(returning=_ID_BODY),
    ),
    "lean": (
        "all four at once",
        raw_schema.Variant(drop=_PARTIAL, index=_NARROW, expiry=False, returning=_ID_BODY),
    ),
    "ready-only index": (
        "the delivery index holds ready messages only (`WHERE state = 1`): a claim leaves"
        " it, an acknowledgement touches only the table (reads of claimed messages by queue,"
        " such as stats and credit, would need another index)",
        raw_schema.Variant(index=_READY),
    ),
}


def _once(variant: raw_schema.Variant | None, n: int, synchronous: str) -> float:
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        if variant is None:
            return raw_sqlite.run(Path(tmp), n, 100, synchronous)
        return raw_schema.run(Path(tmp), n, 100, synchronous, variant)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench schema-cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--synchronous", default="FULL", choices=("FULL", "NORMAL"))
    add_common_options(parser, quick="a smoke run: 1,000 messages, 1 round", repeats=3)
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.repeats = 1_000, 1

    seconds: dict[str, list[float]] = {label: [] for label in _VARIANTS}
    for round_ in range(args.repeats):
        for label, (_, variant) in _VARIANTS.items():
            seconds[label].append(_once(variant, args.n, args.synchronous))
            print(f"round {round_ + 1}: {label}: {args.n / seconds[label][-1]:,.0f}/s")

    rate = {label: args.n / statistics.median(s) for label, s in seconds.items()}
    out = ["# What sluice's SQLite schema costs the batch cycle", ""]
    out += facts_table(machine_facts(Path.cwd(), PACKAGES))
    out += [
        "",
        f"Batches of 100, WAL, synchronous={args.synchronous}, N = {args.n:,} per run; "
        "enqueue, claim and delete as in the cycle benchmark (3 transactions per 100 cycles); "
        f"median of {args.repeats} interleaved rounds.",
        "",
        "| variant | taken away | cycles/s | vs raw | vs sluice schema |",
        "|---|---|---:|---:|---:|",
    ]
    for label, (what, _) in _VARIANTS.items():
        out.append(
            f"| {label} | {what} | {rate[label]:,.0f} | {rate[label] / rate['raw']:.2f} | "
            f"{rate[label] / rate['sluice schema']:.2f} |"
        )
    write_report("schema-cost", "\n".join(out) + "\n", args.out)


if __name__ == "__main__":
    main()
