"""How fast one consumer takes messages from a PostgreSQL queue that holds a backlog.

``python -m bench backlog``: for each backlog size, a queue is filled and then one consumer
takes a fixed number of its messages, one transaction (claim and acknowledgement) per batch,
as sluice and pgqueuer each do it; messages/s = messages taken / seconds taken. A consumer
whose claim reads the whole table (a plan that joins its pick to a scan of the messages)
slows with the backlog; one whose claim is an index lookup does not. Before each drain the
table is ANALYZEd, which sluice's maintainer does within a second of a partition passing
1,000 rows (and autovacuum later for any table): a prepared statement's generic plan is
chosen from those statistics.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.harness import encode, facts_table, machine_facts, make_bodies, pg_facts, write_report
from bench.harness.places import PG_CONNINFO, drop_schema

__all__ = ["Drain", "drain_pgqueuer", "drain_sluice", "main", "render"]

SLUICE_SCHEMA = "sluice_bench_backlog"
PGQUEUER_SCHEMA = "pgqueuer_bench_backlog"
BACKLOGS = (1_000, 10_000, 100_000)
BATCHES = (1, 10)
FILL = 1_000
"""Messages per enqueue transaction while filling."""


@dataclass(frozen=True)
class Drain:
    system: str
    backlog: int
    batch: int
    taken: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.taken / self.seconds


def _analyze(schema: str, table: str) -> None:
    import psycopg

    with psycopg.connect(PG_CONNINFO, autocommit=True) as conn:
        conn.execute(f'ANALYZE "{schema}".{table}')


def drain_sluice(backlog: int, batch: int, take: int) -> Drain:
    """Fill a sluice queue with ``backlog`` messages, then take ``take`` of them."""
    import sluice

    drop_schema(PG_CONNINFO, SLUICE_SCHEMA)
    bodies = make_bodies(FILL)
    try:
        with sluice.connect(f"{PG_CONNINFO}?schema={SLUICE_SCHEMA}") as db:
            db.create_queue("bench")
            q = db.queue("bench")
            for start in range(0, backlog, FILL):
                q.put_many(bodies[: min(FILL, backlog - start)])
            _analyze(SLUICE_SCHEMA, "messages")
            taken = 0
            began = time.perf_counter()
            while taken < take:
                with db.transaction() as tx:
                    got = tx.dequeue("bench", limit=min(batch, take - taken))
                if not got:
                    raise RuntimeError(f"sluice: the queue ran dry after {taken} of {take}")
                taken += len(got)
            seconds = time.perf_counter() - began
    finally:
        drop_schema(PG_CONNINFO, SLUICE_SCHEMA)
    return Drain("sluice", backlog, batch, taken, seconds)


async def _pgqueuer(backlog: int, batch: int, take: int) -> Drain:
    import psycopg
    from pgqueuer import PgQueuer, PsycopgDriver, Queries
    from pgqueuer.models import Job

    drop_schema(PG_CONNINFO, PGQUEUER_SCHEMA)  # as drain_sluice starts, and both end
    async with await psycopg.AsyncConnection.connect(PG_CONNINFO, autocommit=True) as admin:
        await admin.execute(f"CREATE SCHEMA {PGQUEUER_SCHEMA}")
    conn = await psycopg.AsyncConnection.connect(
        PG_CONNINFO, autocommit=True, options=f"-c search_path={PGQUEUER_SCHEMA}"
    )
    try:
        queries = Queries(PsycopgDriver(conn))
        await queries.install()
        payload = encode(make_bodies(1)[0]).encode()
        for start in range(0, backlog, FILL):
            n = min(FILL, backlog - start)
            await queries.enqueue(["bench"] * n, [payload] * n, [0] * n)
        _analyze(PGQUEUER_SCHEMA, "pgqueuer")
        pgq = PgQueuer(queries.driver, queries=queries)
        done = {"n": 0, "first": 0.0, "last": 0.0}

        @pgq.entrypoint("bench")
        async def job(_: Job) -> None:
            # Timed from the first job, not from run(): its start (listener, buffers) is
            # not the per-message cost this measures. The first job's own claim is left
            # out, so take - 1 jobs are counted.
            done["n"] += 1
            if done["n"] == 1:
                done["first"] = time.perf_counter()
            if done["n"] == take:
                done["last"] = time.perf_counter()
                pgq.shutdown.set()

        await asyncio.wait_for(pgq.run(batch_size=batch), timeout=600)
        if done["n"] < take:
            raise RuntimeError(f"pgqueuer: stopped after {done['n']} of {take}")
        return Drain("pgqueuer", backlog, batch, take - 1, done["last"] - done["first"])
    finally:
        await conn.close()
        drop_schema(PG_CONNINFO, PGQUEUER_SCHEMA)


def drain_pgqueuer(backlog: int, batch: int, take: int) -> Drain:
    """Fill a pgqueuer queue with ``backlog`` jobs, then have one PgQueuer run ``take``."""
    return asyncio.run(_pgqueuer(backlog, batch, take))


RUNNERS: dict[str, Callable[[int, int, int], Drain]] = {
    "sluice": drain_sluice,
    "pgqueuer": drain_pgqueuer,
}


def _take(backlog: int, batch: int, per_batch_1: int) -> int:
    return min(backlog // 2, per_batch_1 * batch)


def render(results: dict[tuple[str, int, int], list[Drain]], facts: list[tuple[str, str]],
           repeats: int, per_batch_1: int) -> str:  # fmt: skip
    out = [f"# One consumer against a PostgreSQL backlog, {facts[0][1][:10]}", ""]
    out += facts_table(facts)
    out += ["", (__doc__ or "").split("\n\n", 1)[1].replace("\n", " ").strip(), ""]
    out += [
        f"Messages taken per drain: {per_batch_1:,} at batch 1, ten times that at batch 10 (at "
        f"most half the backlog). sluice: `tx.dequeue('bench', limit=batch)` in a "
        "`db.transaction()` (the claim commits without waiting for the WAL flush, the commit "
        "that acknowledges waits for it). pgqueuer: one `PgQueuer.run(batch_size=batch)` "
        "with a no-op entrypoint, timed from the first job's entrypoint to the last one's "
        "(its start is left out; it acknowledges in buffered batches). No producer runs: "
        "pgqueuer's worker is woken by no notification during the drain, only by its own "
        f"polls. Median of {repeats} runs, interleaved; each run on a fresh schema.",
        "",
        "| backlog | batch | sluice msg/s | pgqueuer msg/s | sluice / pgqueuer |",
        "|---:|---:|---:|---:|---:|",
    ]
    for (system, backlog, batch), runs in sorted(results.items(), key=lambda kv: kv[0][1:]):
        if system != "sluice":
            continue
        mine = statistics.median(r.rate for r in runs)
        theirs_runs = results.get(("pgqueuer", backlog, batch))
        theirs = statistics.median(r.rate for r in theirs_runs) if theirs_runs else None
        ratio = f"{mine / theirs:.2f}" if theirs else "-"
        peer = f"{theirs:,.0f}" if theirs else "-"
        out.append(f"| {backlog:,} | {batch} | {mine:,.0f} | {peer} | {ratio} |")
    out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench backlog", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (median)")
    parser.add_argument("--take", type=int, default=2_000, help="messages taken at batch 1")
    parser.add_argument("--only", action="append", choices=sorted(RUNNERS), help="repeatable")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small backlogs")
    parser.add_argument("--out", type=Path, help="report path (default: bench/results/...)")
    args = parser.parse_args(argv)
    backlogs = (400, 2_000) if args.quick else BACKLOGS
    if args.quick:
        args.repeats, args.take = 1, 100
    systems = args.only or list(RUNNERS)
    results: dict[tuple[str, int, int], list[Drain]] = {}
    for _ in range(args.repeats):
        for backlog in backlogs:
            for batch in BATCHES:
                for system in systems:
                    run = RUNNERS[system](backlog, batch, _take(backlog, batch, args.take))
                    results.setdefault((system, backlog, batch), []).append(run)
                    print(
                        f"{system:9} backlog {backlog:>7,} batch {batch:>2}: "
                        f"{run.rate:>9,.0f} msg/s",
                        file=sys.stderr,
                    )
    packages = ["sluice-queue", "pgqueuer", "psycopg"]
    facts = machine_facts(Path(tempfile.gettempdir()), packages) + pg_facts()
    write_report("backlog", render(results, facts, args.repeats, args.take), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
