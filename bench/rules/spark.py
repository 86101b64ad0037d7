"""Rules on Spark against the local engine, side by side in one run (``make bench-rules``).

- routing: ``bench.rules.routing``'s rule (one order in, three out, a computed property)
  on N preloaded orders: ``run_rules`` on Spark ``local[2]`` against
  ``db.rules.run_until_idle`` in this process, each on a fresh PostgreSQL schema.
  Target: Spark >= 25,000 orders/s.
- procurement: ``sluice.demo.procurement.run_procurement_workload`` (Demaq's process with random
  outcomes) of R requests on both engines; the two databases' queues are compared message
  for message, and each phase is timed.

Writes ``bench/results/rules-spark-<date>.md``.

    python -m bench rules-spark [--orders N] [--requests R] [--per-batch B] [--backend URL]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sluice
from bench.harness import (
    PG_CONNINFO,
    SchemaGuard,
    add_common_options,
    pg_conninfo,
    store_facts,
    url_schema,
    write_report,
)
from bench.rules.routing import ROUTING, check_routed, load_orders
from sluice.demo.procurement import queue_contents, run_procurement_workload
from sluice.spark.options import close_connections
from sluice.spark.pipeline import spark_session
from sluice.spark.rules import run_rules

TARGET = 25_000


def routing(  # noqa: PLR0917  (one case's settings)
    spark: Any, url: str, orders: int, per_batch: int, work: Path, guards: list[SchemaGuard]
) -> dict[str, float]:
    """Orders/s of the routing rule: the local engine at its default batch and at Spark's
    (what the database's write of this work allows: the ceiling of any engine writing
    through it), then Spark, on fresh schemas."""
    out: dict[str, float] = {}
    base = url
    for engine in ("local", "local_batch", "spark"):
        url = _fresh(base, engine)
        guard = SchemaGuard(url)
        guards.append(guard)
        with sluice.connect(url) as db:
            db.apply(ROUTING)
            load_orders(db, orders)
        _analyze(url)  # statistics of the loaded queue, as bench.rules' analyzed cases
        timings: dict[str, float] = {}
        began = time.perf_counter()
        if engine == "spark":
            stats = run_rules(spark, url, checkpoint=str(work / f"ck-{time.time_ns()}"),
                              max_per_batch=per_batch, timings=timings)  # fmt: skip
        else:
            with sluice.connect(url) as db:
                stats = db.rules.run_until_idle(batch=256 if engine == "local" else per_batch)
        seconds = time.perf_counter() - began
        with sluice.connect(url) as db:
            check_routed(db, orders)
        assert stats.processed == orders, stats
        out[engine] = orders / seconds
        if engine == "spark":
            out |= {f"seconds_{k}": v for k, v in timings.items()}
            out["seconds_total"] = seconds
    return out


def _analyze(url: str) -> None:
    import psycopg

    with psycopg.connect(pg_conninfo(url), autocommit=True) as conn:
        conn.execute(f'ANALYZE "{url_schema(url)}".messages')


def _fresh(url: str, tag: str) -> str:
    """``url`` with a schema of its own for one case (dropped after Spark stops: its
    workers keep sessions in it until then)."""
    base, _, query = url.partition("?schema=")
    return f"{base}?schema={query or 'sluice_bench'}_{tag}_{os.getpid()}"


def procurement(
    spark: Any, url: str, requests: int, work: Path, guards: list[SchemaGuard]
) -> dict[str, Any]:
    """Each engine's phases on the generated workload, and whether the queues are equal."""
    url = _fresh(url, "procurement")
    guards.append(SchemaGuard(url))
    local = sluice.connect(f"sqlite:///{work / 'local.db'}")
    began = time.perf_counter()
    expected = run_procurement_workload(local, requests)
    local_seconds = time.perf_counter() - began
    remote = sluice.connect(url)
    checkpoint = work / "ck-procurement"

    def engine(now: float) -> Any:
        return run_rules(spark, url, checkpoint=str(checkpoint), now=now)

    began = time.perf_counter()
    got = run_procurement_workload(remote, requests, engine=engine)
    spark_seconds = time.perf_counter() - began
    equal = queue_contents(remote) == queue_contents(local)
    messages = sum(s.processed for _, _, s in expected.phases)
    remote.close()
    local.close()
    return {"local": expected, "spark": got, "equal": equal, "messages": messages,
            "local_seconds": local_seconds, "spark_seconds": spark_seconds}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench rules-spark", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--orders", type=int, default=200_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--per-batch", type=int, default=100_000)
    parser.add_argument("--backend", default=f"{PG_CONNINFO}?schema=sluice_bench_rules_spark")
    add_common_options(parser, quick="a smoke run: 2,000 orders, 200 requests")
    args = parser.parse_args(argv)
    if args.quick:
        args.orders, args.requests, args.per_batch = 2_000, 200, 1_000
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-rules-spark-"))
    spark = spark_session("local[2]", "sluice-bench-rules")
    guards: list[SchemaGuard] = []
    try:
        routed = routing(spark, args.backend, args.orders, args.per_batch, work, guards)
        proc = procurement(spark, args.backend, args.requests, work, guards)
        facts = store_facts(work, ["sqlite", "postgresql"])
    finally:
        spark.stop()
        close_connections()
        for guard in guards:
            guard.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    head = ["# Rules on Spark against the local engine", "", "## Machine", ""]
    head += [f"- {k}: {v}" for k, v in facts]
    head.append("- Spark: local[2] (2 cores shared with PostgreSQL and the driver)")
    head.append("")
    write_report("rules-spark", "\n".join(head + _report(args, routed, proc)) + "\n", args.out)


def _report(args: argparse.Namespace, routed: dict[str, Any], proc: dict[str, Any]) -> list[str]:
    spark_rate, local_rate, ceiling = routed["spark"], routed["local"], routed["local_batch"]
    steady_seconds = max(routed.get("seconds_steady_seconds", 0), 1e-9)
    steady = routed.get("seconds_steady_rows", 0) / steady_seconds
    verdict = "PASS" if spark_rate >= TARGET else "MISS"
    lines = [
        "## Workloads",
        "",
        f"- routing: {args.orders:,} preloaded orders, each routed into three queues with a "
        f"computed property (bench.rules.routing.ROUTING); Spark `local[2]` with "
        f"max_per_batch {args.per_batch:,} against the local engine (batch 256) in one "
        "process; each on a fresh PostgreSQL schema, ANALYZEd after loading, durable "
        "commits.",
        f"- procurement: run_procurement_workload with {args.requests:,} offer requests "
        "(random checks, orders, payments and reminders on a manual clock), local engine "
        "on a SQLite file against Spark on PostgreSQL; the queues compared message for "
        "message (ids and times aside).",
        "",
        "## Results",
        "",
        "| workload | local engine | Spark | Spark / local |",
        "|---|---:|---:|---:|",
        f"| routing (orders/s) | {local_rate:,.0f} | {spark_rate:,.0f} | "
        f"{spark_rate / local_rate:.2f} |",
        f"| routing, local at Spark's batch ({args.per_batch:,}): the database's ceiling | "
        f"{ceiling:,.0f} | {spark_rate:,.0f} | {spark_rate / ceiling:.2f} |",
        f"| routing, Spark's steady state (micro-batches after the first) | {ceiling:,.0f} | "
        f"{steady:,.0f} | {steady / ceiling:.2f} |",
    ]
    messages = proc["messages"]
    lines.append(
        f"| procurement (messages/s) | {messages / proc['local_seconds']:,.0f} | "
        f"{messages / proc['spark_seconds']:,.0f} | "
        f"{proc['local_seconds'] / proc['spark_seconds']:.2f} |"
    )
    lines += ["", "Procurement phases (seconds: local, Spark; messages processed):", ""]
    for (phase, a, sa), (_, b, sb) in zip(proc["local"].phases, proc["spark"].phases, strict=True):
        lines.append(f"- {phase}: {a:.2f} s, {b:.2f} s; {sa.processed:,} and {sb.processed:,}")
    lines += [
        "",
        f"Same queues on both engines: {'yes' if proc['equal'] else 'NO'}.",
        "",
        "## Target",
        "",
        f"- {verdict}: routing on Spark {spark_rate:,.0f} orders/s end to end, {steady:,.0f} "
        f"in its steady state (target >= {TARGET:,}); the database's ceiling for this work "
        f"(the local engine at batch {args.per_batch:,}): {ceiling:,.0f}",
        "",
        "## Where the Spark routing run's time goes (seconds)",
        "",
        f"- total: {routed['seconds_total']:.1f}",
        f"- the micro-batch's messages read into the driver (the source, Arrow): "
        f"{routed.get('seconds_read', 0):.1f}",
        f"- Spark SQL evaluating the rules and the results back: "
        f"{routed.get('seconds_evaluate', 0):.1f}",
        f"- the queues' database transactions, evaluation aside (deciding, building and "
        f"enqueuing the messages, marking processed): "
        f"{routed.get('seconds_transactions', 0) - routed.get('seconds_evaluate', 0):.1f}",
        "- the rest: starting the query, planning offsets, Spark's commit log",
    ]
    return lines


if __name__ == "__main__":
    main()
