"""sluice's own claim and acknowledgement, driven by pgbench beside sluice itself.

``python -m bench pgbench-cycle``: C clients (1, then 10), each taking messages one per
transaction from a queue of its own, as 10 subscriptions' consumers do in ``bench
topics``. pgbench (PostgreSQL's C client, prepared statements) runs the very statements
sluice's backend sends for it: the claim (``claim`` in queries.sql, the plain one: no
selection, no ordering; it commits without waiting for the WAL flush) and the
acknowledgement (``delete_claimed``, durable), each its own transaction, with the planner
settings sluice's connections use. Then sluice does the same work with C threads sharing
one ``sluice.connect``. deliveries/s = messages claimed and acknowledged / seconds.

What pgbench reaches is what the server allows this work on this machine whatever the
client: a bound for sluice's one-message-per-transaction figures on PostgreSQL (its
topics, its plain queues), and, against sluice's own row, what sluice's Python costs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.harness import facts_table, machine_facts, make_bodies, pg_facts, write_report
from bench.harness.places import PG_CONNINFO, drop_schema

SCHEMA = "sluice_bench_pgbench"
CLIENTS = (1, 10)
_FILL = 1_000


def _pgbench() -> str | None:
    found = shutil.which("pgbench")
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))
    return str(candidates[-1]) if candidates else None


def _fill(clients: int, per_queue: int) -> None:
    """A fresh schema with queues q0.. q{clients-1}, each holding ``per_queue`` messages."""
    import sluice

    drop_schema(PG_CONNINFO, SCHEMA)
    bodies = make_bodies(_FILL)
    with sluice.connect(f"{PG_CONNINFO}?schema={SCHEMA}") as db:
        for c in range(clients):
            q = db.create_queue(f"q{c}")
            for _ in range(per_queue // _FILL):
                q.put_many(bodies)


def _one_line(text: str) -> str:
    """A statement on one line, without its comments: a pgbench script's commands end at
    the line's end."""
    code = (line.split("--", 1)[0].strip() for line in text.splitlines())
    return " ".join(c for c in code if c).rstrip(";")


def _script() -> str:
    """sluice's claim and acknowledgement as a pgbench script: psycopg's %(name)s become
    pgbench variables; each client takes from its own queue, q<client_id>."""
    from sluice.backends.postgres_queries import load_queries

    ready, templates = load_queries(SCHEMA)
    claim = templates["claim"]
    claim_sql = claim.fill(**dict.fromkeys(claim.holes, ""))
    values = {
        "session": ":session",
        "tx": ":tx",
        "queue": "('q' || :client_id)",
        "now": ":now",
        "limit": "1",
    }
    claim_sql = re.sub(r"%\((\w+)\)s", lambda m: values[m[1]], claim_sql).replace("%%", "%")
    settle = (
        ready["delete_claimed"]
        .replace("%(ids)s::bigint[]", "ARRAY[:c_id]::bigint[]")
        .replace("%(session)s", ":session")
        .replace("%(tx)s", ":tx")
        .replace("%(expected)s", "1")
    )
    return "\n".join(
        [
            "\\set session 1",
            "\\set tx random(1, 1000000000)",
            f"\\set now {int(time.time()) + 86_400}",
            _one_line(claim_sql) + " \\gset c_",
            _one_line(settle) + ";",
            "",
        ]
    )


def _run_pgbench(pgbench: str, clients: int, seconds: float) -> float:
    from sluice.backends.postgres_pooler import SETTINGS

    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(_script())
    env = dict(os.environ, PGOPTIONS=" ".join(f"-c {k}={v}" for k, v in SETTINGS))
    try:
        out = subprocess.run(
            [pgbench, "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
             "-T", str(max(int(seconds), 1)), "-f", f.name, PG_CONNINFO],
            env=env, capture_output=True, text=True, check=False, timeout=seconds + 120,
        )  # fmt: skip
    finally:
        os.unlink(f.name)
    found = re.search(r"^tps = ([\d.]+)", out.stdout, re.MULTILINE)
    failed = re.search(r"number of failed transactions: (\d+)", out.stdout)
    if out.returncode != 0 or found is None or (failed and int(failed[1])):
        raise RuntimeError(f"pgbench failed:\n{out.stdout}\n{out.stderr}")
    return float(found[1])


def _run_sluice(clients: int, seconds: float) -> float:
    import sluice

    taken = [0] * clients
    stop = threading.Event()
    errors: list[BaseException] = []
    with sluice.connect(f"{PG_CONNINFO}?schema={SCHEMA}") as db:

        def drain(c: int) -> None:
            try:
                while not stop.is_set():
                    with db.transaction() as tx:
                        if not tx.dequeue(f"q{c}", limit=1):
                            raise RuntimeError(f"q{c} ran dry: fill more for {seconds:g} s")
                    taken[c] += 1
            except BaseException as exc:
                errors.append(exc)
                stop.set()

        workers = [threading.Thread(target=drain, args=(c,)) for c in range(clients)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        stop.wait(seconds)
        stop.set()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"sluice: {errors[0]}")
    return sum(taken) / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench pgbench-cycle", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="measured per run")
    parser.add_argument("--out", type=Path, help="report path (default: bench/results/...)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 s per run")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 1.0
    pgbench = _pgbench()
    if pgbench is None:
        print("pgbench not found: install PostgreSQL's server package", file=sys.stderr)
        return 2
    rows: list[tuple[int, float, float]] = []
    try:
        for clients in CLIENTS:
            # Enough for pgbench at up to 8,000 deliveries/s in all (5,600 seen here with 10
            # clients, 3,000 with one): a queue that runs dry fails the run.
            per_queue = (int(args.seconds * 8_000 / clients) // _FILL + 1) * _FILL
            _fill(clients, per_queue)
            c_rate = _run_pgbench(pgbench, clients, args.seconds)
            _fill(clients, per_queue)
            s_rate = _run_sluice(clients, args.seconds)
            rows.append((clients, c_rate, s_rate))
            print(f"{clients} clients: pgbench {c_rate:,.0f}/s, sluice {s_rate:,.0f}/s",
                  file=sys.stderr, flush=True)  # fmt: skip
    finally:
        drop_schema(PG_CONNINFO, SCHEMA)
    lines = [f"# sluice's claim and acknowledgement under pgbench, {time.strftime('%Y-%m-%d')}", ""]
    lines += facts_table(machine_facts(Path(tempfile.gettempdir())) + pg_facts())
    lines += [
        "",
        "Each client takes from its own queue, one message per transaction: sluice's `claim`"
        " (committing without waiting for the WAL flush) and then `delete_claimed` (waiting"
        " for it), each its own transaction. pgbench runs those statements, prepared, with"
        " sluice's planner settings; sluice runs them itself from as many threads sharing"
        f" one Database. One run of {args.seconds:g} s each.",
        "",
        "| clients | pgbench: deliveries/s | sluice: deliveries/s | sluice / pgbench |",
        "|---:|---:|---:|---:|",
    ]
    lines += [f"| {c} | {p:,.0f} | {s:,.0f} | {s / p:.2f} |" for c, p, s in rows]
    write_report("pgbench-cycle", "\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
