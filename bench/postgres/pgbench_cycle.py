"""sluice's own claim and acknowledgement, driven by pgbench beside sluice itself.

``python -m bench pgbench-cycle``: C clients (1, then 10), each taking messages one per
transaction from a queue of its own, as 10 subscriptions' consumers do in ``bench
topics``. pgbench (PostgreSQL's C client, prepared statements) runs the very statements
sluice's backend sends for it: the claim (``claim`` in queries.sql, the plain one: no
selection, no ordering; it commits without waiting for the WAL flush) and the
acknowledgement (``delete_claimed``, durable), each its own transaction, with the planner
settings sluice's connections use. Then sluice does the same work with C threads sharing
one ``sluice.connect``, and with C coroutines on one event loop (``sluice.aio``).
deliveries/s = messages claimed and acknowledged / seconds.

What pgbench reaches is what the server allows this work on this machine whatever the
client: a bound for sluice's one-message-per-transaction figures on PostgreSQL (its
topics, its plain queues), and, against sluice's own row, what sluice's Python costs.

Three more rows, in the same run, bound it from the Python side and set it beside the
broker ``bench topics`` compares with:

- *psycopg*: the same two statements, prepared, from C threads of this process, each on a
  connection of its own: what a Python client of this design reaches with nothing of
  sluice around the statements (the interpreter lock is shared, as sluice's threads share
  it).
- *psycopg, a held lock*: a design sluice does not have, whose database transaction lasts
  as long as the queue transaction: the claim only locks its row (sluice's claim's pick,
  ``FOR UPDATE SKIP LOCKED``, with no write), and the acknowledgement deletes it in the
  same transaction, one durable commit. A consumer that dies rolls back with its
  connection; no claim is written, so there is none to recover.
- *RabbitMQ*: C pika consumers (threads, one ``BlockingConnection`` each), each draining a
  durable classic queue of its own, prefetch 1, one ``basic_ack`` per message, as ``bench
  topics`` consumes at batch 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import facts_table, machine_facts, make_bodies, pg_facts, write_report
from bench.harness.places import (
    PG_CONNINFO,
    RABBIT_HOST,
    RABBIT_PORT,
    answers,
    drop_schema,
    rabbit_params,
)

SCHEMA = "sluice_bench_pgbench"
CLIENTS = (1, 10)
_FILL = 1_000
_PICK = f"""SELECT id FROM {SCHEMA}.messages
WHERE queue_id = (SELECT id FROM {SCHEMA}.queues WHERE name = %(queue)s AND NOT paused)
  AND state = 1 AND available_at <= %(now)s AND (expires_at IS NULL OR expires_at > %(now)s)
ORDER BY priority DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED"""
_DELETE = f"DELETE FROM {SCHEMA}.messages WHERE id = %(id)s"
RABBIT_QUEUE = "sluice_bench_pgbench_q{}"


@dataclass(frozen=True)
class Row:
    """deliveries/s of each client at one number of clients."""

    clients: int
    pgbench: float
    sluice: float
    aio: float
    psycopg: float
    held: float
    rabbit: float | None

    def line(self) -> str:
        def ratio(a: float, b: float | None) -> str:
            return "-" if b is None else f"{a / b:.2f}"

        return (
            f"| {self.clients} | {self.pgbench:,.0f} | {self.sluice:,.0f} | {self.aio:,.0f}"
            f" | {self.psycopg:,.0f} | {self.held:,.0f} | {_rate(self.rabbit)}"
            f" | {ratio(self.sluice, self.pgbench)} | {ratio(self.sluice, self.psycopg)}"
            f" | {ratio(self.psycopg, self.rabbit)} | {ratio(self.held, self.rabbit)}"
            f" | {ratio(self.sluice, self.rabbit)} | {ratio(self.aio, self.rabbit)} |"
        )


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


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
    claim_sql, settle_sql = _statements()
    values = {
        "session": ":session",
        "tx": ":tx",
        "queue": "('q' || :client_id)",
        "now": ":now",
        "limit": "1",
    }
    claim_sql = re.sub(r"%\((\w+)\)s", lambda m: values[m[1]], claim_sql).replace("%%", "%")
    settle = (
        settle_sql.replace("%(ids)s::bigint[]", "ARRAY[:c_id]::bigint[]")
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


Drain = Callable[[int, list[int], threading.Event], None]
"""One client's loop: ``drain(c, taken, stop)`` counts its deliveries into ``taken[c]``
until ``stop`` is set."""


class _Dry(Exception):
    """Client ``c``'s queue is empty: the measured window ends here."""

    def __init__(self, c: int) -> None:
        super().__init__(f"q{c} ran dry")


NOTES: list[str] = []
"""Windows that ended before ``--seconds``, for the report."""


def _timed(who: str, clients: int, seconds: float, drain: Drain) -> float:
    """Deliveries/s of ``clients`` threads running ``drain`` for ``seconds``; the first
    error of any ends them all and is raised, naming ``who``.

    A client whose queue runs dry (``_Dry``) ends the window there, with what all had
    delivered by then: every client had work throughout it. Filling for the fastest client
    would not do: with 10 threads on 2 cores one can run at the single client's rate for a
    while and empty its queue early (CI: RabbitMQ's q6 at 10 clients)."""
    taken = [0] * clients
    stop = threading.Event()
    errors: list[BaseException] = []
    dry: list[tuple[float, int, int]] = []  # (when, deliveries by then, client)

    def run(c: int) -> None:
        try:
            drain(c, taken, stop)
        except _Dry:
            dry.append((time.perf_counter(), sum(taken), c))
            stop.set()
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    workers = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    stop.wait(seconds)
    stop.set()
    for w in workers:
        w.join()
    if errors:
        raise RuntimeError(f"{who}: {errors[0]}")
    return _rate_over(who, clients, seconds, start=start, taken=taken, dry=dry)


def _rate_over(
    who: str,
    clients: int,
    seconds: float,
    *,
    start: float,
    taken: list[int],
    dry: list[tuple[float, int, int]],
) -> float:
    """Deliveries/s from ``start`` to now, or to the first client's running dry (then
    noted for the report)."""
    end, done = time.perf_counter(), sum(taken)
    if dry:
        end, done, c = min(dry)
        note = f"{who} at {clients} clients: q{c} ran dry after {end - start:.2f} s of {seconds:g}"
        NOTES.append(note + "; its rate is over that window")
        print(note, file=sys.stderr, flush=True)
    return done / (end - start)


def _run_sluice(clients: int, seconds: float) -> float:
    import sluice

    with sluice.connect(f"{PG_CONNINFO}?schema={SCHEMA}") as db:

        def drain(c: int, taken: list[int], stop: threading.Event) -> None:
            while not stop.is_set():
                with db.transaction() as tx:
                    if not tx.dequeue(f"q{c}", limit=1):
                        raise _Dry(c)
                taken[c] += 1

        return _timed("sluice", clients, seconds, drain)


def _run_sluice_aio(clients: int, seconds: float) -> float:
    """As ``_run_sluice``, with ``clients`` coroutines on one event loop (sluice.aio)."""
    import asyncio

    import sluice.aio

    async def run() -> float:
        async with sluice.aio.connect(f"{PG_CONNINFO}?schema={SCHEMA}") as db:
            taken = [0] * clients
            stop = asyncio.Event()
            dry: list[tuple[float, int, int]] = []  # (when, deliveries by then, client)

            async def drain(c: int) -> None:
                while not stop.is_set():
                    async with db.transaction() as tx:
                        if not await tx.dequeue(f"q{c}", limit=1):
                            dry.append((time.perf_counter(), sum(taken), c))
                            stop.set()
                            return
                    taken[c] += 1

            start = time.perf_counter()
            tasks = [asyncio.create_task(drain(c)) for c in range(clients)]
            try:
                await asyncio.wait_for(stop.wait(), seconds)
            except TimeoutError:
                stop.set()
            await asyncio.gather(*tasks)
            return _rate_over("sluice.aio", clients, seconds, start=start, taken=taken, dry=dry)

    return asyncio.run(run())


def _statements() -> tuple[str, str]:
    """sluice's plain claim and its acknowledgement, as psycopg runs them (%(name)s)."""
    from sluice.backends.postgres_queries import load_queries

    ready, templates = load_queries(SCHEMA)
    claim = templates["claim"]
    return claim.fill(**dict.fromkeys(claim.holes, "")), ready["delete_claimed"]


def _run_psycopg(clients: int, seconds: float, *, held: bool) -> float:
    """sluice's statements from Python threads with nothing of sluice around them; or, with
    ``held``, the design whose claim is a row lock held until the acknowledgement."""
    import random

    import psycopg

    from sluice.backends.postgres_pooler import SETTINGS

    claim, settle = _statements()
    options = " ".join(f"-c {k}={v}" for k, v in SETTINGS)
    now = time.time() + 86_400

    def drain(c: int, taken: list[int], stop: threading.Event) -> None:
        # Autocommit: each statement its own transaction and one round trip, as sluice
        # sends them; held, BEGIN and the pick go together, then the delete and COMMIT (a
        # pipeline): two round trips.
        with psycopg.connect(PG_CONNINFO, options=options, autocommit=True) as conn:
            while not stop.is_set():
                tx = random.randrange(1, 1_000_000_000)
                args = {"session": 1, "tx": tx, "queue": f"q{c}", "now": now, "limit": 1}
                if held:
                    with conn.pipeline():
                        conn.execute("BEGIN")
                        row = conn.execute(_PICK, args, prepare=True).fetchone()
                        if row is None:
                            raise _Dry(c)
                        conn.execute(_DELETE, {"id": row[0]}, prepare=True)
                        conn.execute("COMMIT")
                else:
                    row = conn.execute(claim, args, prepare=True).fetchone()
                    if row is None or row[0] is None:
                        raise _Dry(c)
                    done = {"ids": [row[0]], "session": 1, "tx": tx, "expected": 1}
                    conn.execute(settle, done, prepare=True)
                taken[c] += 1

    return _timed("psycopg", clients, seconds, drain)


def _fill_rabbit(clients: int, per_queue: int) -> None:
    """Durable classic queues, each holding ``per_queue`` persistent messages of the bodies
    sluice's queues hold; waits until the broker counts them all."""
    import pika

    bodies = [json.dumps(b).encode() for b in make_bodies(_FILL)]
    persistent = pika.BasicProperties(delivery_mode=2)
    conn = pika.BlockingConnection(rabbit_params())
    try:
        ch = conn.channel()
        for c in range(clients):
            name = RABBIT_QUEUE.format(c)
            ch.queue_delete(name)
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": "classic"})
            for n in range(per_queue):
                ch.basic_publish("", name, bodies[n % _FILL], persistent)
        deadline = time.monotonic() + 120
        for c in range(clients):
            name = RABBIT_QUEUE.format(c)
            while ch.queue_declare(name, passive=True).method.message_count < per_queue:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"RabbitMQ: {name} not filled after 120 s")
                conn.sleep(0.1)
    finally:
        conn.close()


def _drop_rabbit(clients: int) -> None:
    """Deletes the queues."""
    import pika

    conn = pika.BlockingConnection(rabbit_params())
    try:
        ch = conn.channel()
        for c in range(clients):
            ch.queue_delete(RABBIT_QUEUE.format(c))
    finally:
        conn.close()


def _run_rabbit(clients: int, seconds: float, per_queue: int) -> float:
    import pika

    def drain(c: int, taken: list[int], stop: threading.Event) -> None:
        conn = pika.BlockingConnection(rabbit_params())
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=1)

            def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
                ch.basic_ack(delivery_tag=method.delivery_tag)
                taken[c] += 1

            ch.basic_consume(RABBIT_QUEUE.format(c), on_message, auto_ack=False)
            while not stop.is_set():
                conn.process_data_events(time_limit=0.05)
                if taken[c] >= per_queue:
                    raise _Dry(c)
        finally:
            conn.close()

    return _timed("RabbitMQ", clients, seconds, drain)


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
    rabbit = answers(RABBIT_HOST, RABBIT_PORT)
    rows: list[Row] = []
    try:
        for clients in CLIENTS:
            # Enough for pgbench at up to 8,000 deliveries/s in all (5,600 seen here with 10
            # clients, 3,000 with one). pgbench cannot tell an empty queue from a full one;
            # for the Python clients a queue that runs dry ends the window (_timed).
            per_queue = (int(args.seconds * 8_000 / clients) // _FILL + 1) * _FILL
            _fill(clients, per_queue)
            c_rate = _run_pgbench(pgbench, clients, args.seconds)
            _fill(clients, per_queue)
            s_rate = _run_sluice(clients, args.seconds)
            _fill(clients, per_queue)
            a_rate = _run_sluice_aio(clients, args.seconds)
            _fill(clients, per_queue)
            p_rate = _run_psycopg(clients, args.seconds, held=False)
            _fill(clients, per_queue)
            o_rate = _run_psycopg(clients, args.seconds, held=True)
            r_rate = None
            if rabbit:
                _fill_rabbit(clients, per_queue)
                try:
                    r_rate = _run_rabbit(clients, args.seconds, per_queue)
                finally:
                    _drop_rabbit(clients)
            rows.append(Row(clients, c_rate, s_rate, a_rate, p_rate, o_rate, r_rate))
            print(f"{clients} clients: pgbench {c_rate:,.0f}/s, sluice {s_rate:,.0f}/s,"
                  f" sluice.aio {a_rate:,.0f}/s,"
                  f" psycopg {p_rate:,.0f}/s, psycopg with a held lock {o_rate:,.0f}/s,"
                  f" RabbitMQ {_rate(r_rate)}", file=sys.stderr, flush=True)  # fmt: skip
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
        " one Database, and *sluice.aio* from as many coroutines on one event loop; psycopg"
        " runs them, prepared, from as many threads, each on its own"
        " connection, with nothing of sluice around them; *a held lock* is psycopg running a"
        " design sluice does not have: the claim only locks its row (sluice's pick, FOR"
        " UPDATE SKIP LOCKED, no write) and the acknowledgement deletes it in the same"
        " transaction, one durable commit. RabbitMQ: as many pika"
        " consumers, each draining a durable classic queue of its own (persistent messages"
        " of the same bodies), prefetch 1, an ack per message"
        + ("" if rabbit else " (not running here: no figure)")
        + f". One run of {args.seconds:g} s each; every row is durable at the acknowledgement"
        " but RabbitMQ's, whose acks are not synced before they take effect.",
        "",
        "| clients | pgbench | sluice | sluice.aio | psycopg | psycopg, a held lock | RabbitMQ"
        " | sluice / pgbench | sluice / psycopg | psycopg / RabbitMQ"
        " | a held lock / RabbitMQ | sluice / RabbitMQ | sluice.aio / RabbitMQ |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [row.line() for row in rows]
    lines += ["", "deliveries/s; ratios of deliveries/s."]
    lines += [f"- {note}." for note in NOTES]
    write_report("pgbench-cycle", "\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
