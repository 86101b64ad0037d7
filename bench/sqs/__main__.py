"""The SQS endpoint against sluice's own HTTP API and its Python API, the same work.

Run: ``python -m bench sqs`` (``make bench-sqs``; ``--quick`` for a smoke run of seconds,
``--only sqlite`` or ``--only postgresql``). One real ``sluice serve`` (its CLI, uvicorn,
a signing key) serves both HTTP APIs of a database: a SQLite file (sluice's default
durability, synchronous=FULL) and PostgreSQL (127.0.0.1:5432, database ``test``, schema
``bench_sqs`` made fresh and dropped after). 1 and 16 closed-loop client threads:

1. send 10: boto3 SendMessageBatch of 10 / ``POST /api/queues/{q}/messages`` with 10 /
   ``put_many`` of 10;
2. receive 10 + delete: boto3 ReceiveMessage (up to 10) + DeleteMessageBatch / a lease of
   up to 10 and an ack per message, and a transaction (begin, dequeue 10, commit) / a
   dequeue of 10 in a transaction;
3. send 1 (1 client): one durable SendMessage / enqueue of 1 / ``put``: its latency.

The SQS requests go through boto3 and, the same requests, through a lean client
(bench/sqs/lean.py) that costs the 2 cores a fifth of boto3's CPU per request.

Targets (issue 43): SQS >= 0.7 x the HTTP API's msgs/s; one SendMessage p50 <= 3 ms.
Writes ``bench/results/sqs-<date>.md`` (``--quick``: the temp directory unless ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import sluice
from bench.harness import (
    PG_CONNINFO,
    add_common_options,
    drop_schema,
    one_line,
    package_versions,
    store_facts,
    write_report,
)
from bench.server.clients import Factory, drive
from bench.server.procs import LOG_LEVEL, Server, canned_sqs, sluice_serve
from bench.server.report import Row
from bench.sqs.clients import REGION, WORKLOADS, http_ops, in_process_ops, sqs_ops
from bench.sqs.lean import lean_ops
from bench.sqs.report import (
    HTTP,
    HTTP_TX,
    IN_PROCESS,
    SQS,
    SQS_CANNED,
    SQS_LEAN,
    Results,
    render,
)

SYSTEMS = ("sqlite", "postgresql")
SCHEMA = "bench_sqs"
KEY = "bench"
QUEUES = {
    SQS: "bench_sqs",
    SQS_LEAN: "bench_sqs",
    HTTP: "bench_http",
    HTTP_TX: "bench_http",
    IN_PROCESS: "bench_py",
}
_PACKAGES = ("sluice", "boto3", "botocore", "urllib3", "fastapi", "starlette", "uvicorn",
             "httptools", "uvloop", "cryptography", "psycopg")  # fmt: skip

Log = Callable[[str], None]

NOTES = [
    "**boto3's own CPU.** boto3 spends about 1-2 ms of CPU per request here (its *client "
    "CPU* column: shape validation, serialization, event hooks, signing, parsing, MD5 "
    "checks), as much as the server spends on a batch of 10, on the same 2 cores. The lean "
    "client's rows (bench/sqs/lean.py: the same requests, signed by a few lines over "
    "http.client) are the endpoint's own rate; the boto3 rows are what a boto3 user gets on "
    "a machine this small. Their bound is measured in the same run: boto3 against an "
    f"endpoint of canned answers that does no work at all (*{SQS_CANNED}*, "
    "bench/sqs/floor.py).",
    "**A receive takes each message in a transaction of its own** (a lease, so that each "
    "deletes, changes or expires alone: SQS's receipt handles), as the HTTP API's leases "
    "do; the HTTP API's transaction takes 10 in one statement and settles them in one "
    "commit, which no set of receipt handles can be. The endpoint claims a receive's "
    "messages in one statement (`Database.get_many`: each message still held, and later "
    "deleted or expired, on its own) and commits the deletes of one turn of its event loop "
    "(a DeleteMessageBatch's) together (`Database.ack_many`: one commit, one flush).",
    "**Durable SendMessage** waits for its commit's fsync (SQLite `synchronous=FULL`; "
    "PostgreSQL's WAL flush): the in-process `put` row is that floor on this disk.",
]


@dataclass(frozen=True)
class Settings:
    seconds: float
    """Length of one timed run."""
    repeats: int
    warmup: int
    """Untimed operations per client before each run."""
    clients: tuple[int, ...]
    backlog: int
    """Ready messages an API's queue holds (topped up, untimed) before a receive row."""

    @classmethod
    def full(cls, repeats: int) -> Settings:
        return cls(seconds=2.0, repeats=repeats, warmup=5, clients=(1, 16), backlog=20_000)

    @classmethod
    def quick(cls) -> Settings:
        return cls(seconds=0.3, repeats=1, warmup=1, clients=(1, 16), backlog=1_500)


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Place:
    """The bench's database on one system, its signing key and a key for its queues."""

    system: str
    url: str
    signing: Path
    secret: str


@contextlib.contextmanager
def fresh(system: str, tmp_root: Path) -> Iterator[Place]:
    """A new database with the HTTP and in-process queues, a signing key and a key that
    may produce, consume and manage ``bench*``; removed when the block ends."""
    from sluice.server.grants import Grant, Keys
    from sluice.server.signing import SigningKey

    tmp = Path(tempfile.mkdtemp(prefix="bench-sqs-", dir=tmp_root))
    is_pg = system == "postgresql"
    if system == "sqlite":
        url = f"sqlite:///{tmp / 'sqs.db'}"
    elif is_pg:
        url = f"{PG_CONNINFO}?schema={SCHEMA}"
        drop_schema(PG_CONNINFO, SCHEMA)
    else:
        raise ValueError(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")
    try:
        signing = SigningKey.generate(tmp / "signing.key")
        with sluice.connect(url) as db:
            for name in {QUEUES[HTTP], QUEUES[IN_PROCESS]}:
                db.create_queue(name)
            grant = Grant.parse("bench*:produce,consume,manage")
            secret = Keys(db, signing=signing).add(KEY, [grant])
        yield Place(system, url, tmp / "signing.key", secret)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_pg:
            drop_schema(PG_CONNINFO, SCHEMA)


def _top_up(db: sluice.Database, queue: str, backlog: int) -> None:
    """The queue's ready messages up to ``backlog`` (untimed, in-process)."""
    from bench.harness import make_bodies

    bodies = make_bodies(500)
    q = db.queue(queue)
    while (ready := q.stats()["ready"]) < backlog:
        q.put_many(bodies[: min(500, backlog - ready)])


def _measure(row: Row, make: Factory, s: Settings, pid: int | None, log: Log) -> None:
    if row.error:
        return
    try:
        run = drive(make, row.clients, s.seconds, s.warmup, pid)
    except Exception as exc:  # reported in its row; the others go on
        row.error = one_line(exc)
        log(f"{row.system} {row.api} {row.workload} x{row.clients}: {row.error}")
        return
    row.runs.append(run)
    rate = run.messages / run.seconds if run.seconds else 0.0
    log(f"{row.system} {row.api} {row.workload} x{row.clients}: {rate:,.0f} msgs/s")


_REQUESTS = {(SQS, "receive 10 + delete"): 2, (SQS_LEAN, "receive 10 + delete"): 2,
             (SQS_CANNED, "receive 10 + delete"): 2,
             (HTTP, "receive 10 + delete"): 11, (HTTP_TX, "receive 10 + delete"): 3}  # fmt: skip
"""Requests per operation where it is not one (a lease of 10 and its acks: 11 when full)."""


def _rows(system: str, s: Settings) -> list[Row]:
    rows = []
    for w in WORKLOADS:
        apis = [SQS, SQS_CANNED, SQS_LEAN, HTTP, HTTP_TX, IN_PROCESS] if w.startswith(
            "receive") else [SQS, SQS_CANNED, SQS_LEAN, HTTP, IN_PROCESS]  # fmt: skip
        for c in (1,) if w == "send 1" else s.clients:
            rows += [Row(system, api, w, c, _REQUESTS.get((api, w), 1)) for api in apis]
    return rows


def _rounds(
    rows: list[Row],
    s: Settings,
    place: Place,
    db: sluice.Database,
    *,
    server: Server,
    canned: Server,
    log: Log,
) -> None:
    import boto3

    endpoint = f"http://127.0.0.1:{server.port}"
    admin = boto3.client("sqs", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=KEY,
                         aws_secret_access_key=place.secret)  # fmt: skip
    queue_url = admin.create_queue(QueueName=QUEUES[SQS])["QueueUrl"]
    admin.close()
    http = http_ops(server.port, place.secret, QUEUES[HTTP])
    at = f"http://127.0.0.1:{canned.port}"
    canned_ops = sqs_ops(at, KEY, place.secret, f"{at}/000000000000/bench_sqs")
    ops: dict[str, tuple[dict[str, Factory], int]] = {
        SQS: (sqs_ops(endpoint, KEY, place.secret, queue_url), server.pid),
        SQS_CANNED: (canned_ops, canned.pid),
        SQS_LEAN: (lean_ops(server.port, KEY, place.secret, queue_url), server.pid),
        HTTP: (http, server.pid),
        HTTP_TX: ({"receive 10 + delete": http["receive 10 + delete (tx)"]}, server.pid),
        IN_PROCESS: (in_process_ops(db, QUEUES[IN_PROCESS]), os.getpid()),
    }
    for _ in range(s.repeats):
        for row in rows:
            if row.workload.startswith("receive") and row.api != SQS_CANNED:
                _top_up(db, QUEUES[row.api], s.backlog)
            made, pid = ops[row.api]
            _measure(row, made[row.workload], s, pid, log)


def run_system(system: str, s: Settings, tmp_root: Path, res: Results, log: Log) -> None:
    """Every row of one backend, the three APIs interleaved on one database."""
    rows = _rows(system, s)
    res.rows += rows
    try:
        with fresh(system, tmp_root) as place, sluice.connect(place.url) as db:
            signing = ("--signing-key", str(place.signing))
            with sluice_serve(place.url, *signing) as server, canned_sqs() as canned:
                _rounds(rows, s, place, db, server=server, canned=canned, log=log)
    except Exception as exc:
        for row in rows:
            row.error = row.error or one_line(exc)
        log(f"{system}: {one_line(exc)}")


def facts(tmp_root: Path, systems: Sequence[str]) -> list[tuple[str, str]]:
    rows = store_facts(tmp_root, systems)
    one, five, fifteen = os.getloadavg()
    rows += [
        ("Server", f"`sluice serve --db URL --signing-key FILE --log-level {LOG_LEVEL}`: one "
                   "uvicorn process serving sluice's HTTP API and the SQS endpoint"),
        ("Packages", package_versions(_PACKAGES)),
        ("Load average at the start", f"{one:.2f}, {five:.2f}, {fifteen:.2f}"),
    ]  # fmt: skip
    return rows


def workload(s: Settings) -> list[str]:
    return [
        f"Each row is {s.repeats} run(s) of {s.seconds:g} s of closed-loop clients (each does "
        f"its next operation as soon as the last one answered), after {s.warmup} untimed "
        "operations per client; msgs/s is the median of the runs, latencies (one operation, "
        "as the client sees it) are pooled over them. The APIs' rows alternate, on one "
        "database; each API has its own queue (`bench_sqs` made by CreateQueue, `bench_http`, "
        f"`bench_py`), topped up to {s.backlog:,} ready messages (in-process, untimed) before "
        "every receive row. Bodies of about 100 bytes; batches of 10.",
        "",
        f"- **{SQS}**: one boto3 client per thread (its own keep-alive connection), Signature "
        f"Version 4 with the sluice key `{KEY}` (grant `bench*:produce,consume,manage`), JSON "
        "protocol: `SendMessageBatch` of 10; `ReceiveMessage` (MaxNumberOfMessages 10, "
        "WaitTimeSeconds 0, the queue's VisibilityTimeout 30 s) then `DeleteMessageBatch` of "
        "what it got; `SendMessage`.",
        f"- **{SQS_CANNED}**: the boto3 client and requests of the first row against an "
        "endpoint that does no work (bench/sqs/floor.py: uvicorn and a bare ASGI app answering "
        "each request with a canned, valid answer; nothing checked, nothing stored): boto3's "
        "ceiling on this machine, the bound of the boto3 rows.",
        f"- **{SQS_LEAN}**: the same requests over the standard library's `http.client` "
        "(one keep-alive connection per thread), signed with Signature Version 4 by "
        "bench/sqs/lean.py (hashlib and hmac; the day's signing key derived once), the "
        "answers parsed as JSON and nothing else checked.",
        f"- **{HTTP}**: sluice's own API in the same server, the same key as "
        "`Authorization: Bearer`, the standard library's `http.client` (one keep-alive "
        "connection per thread, as in bench/server): `POST /api/queues/bench_http/messages` "
        'with 10 or 1 messages; `POST .../leases` `{"limit": 10, "wait": 0}` then `POST '
        "/api/leases/{token}/ack` per message.",
        f"- **{HTTP_TX}**: `POST /api/transactions`, `POST .../queues/bench_http/dequeue` "
        '`{"limit": 10}`, `POST .../commit`: the HTTP API\'s batch receive-and-settle.',
        f"- **{IN_PROCESS}**: `db.queue('bench_py')` in the bench's process (one Database "
        "shared by the threads): `put_many` of 10; `tx.dequeue('bench_py', limit=10)` in "
        "`db.transaction()`; `put`.",
        "",
        "*Serving CPU*: the CPU time of `sluice serve` (for in-process rows: of the bench's "
        "process, clients included) per message; PostgreSQL's backends are not counted. "
        "Client CPU per request: the bench's process (boto3 or http.client). Client and "
        "server share the 2 cores.",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    first_line = __doc__.splitlines()[0]
    parser = argparse.ArgumentParser(prog="python -m bench sqs", description=first_line)
    add_common_options(
        parser,
        quick="a smoke run of seconds",
        repeats=3,
        repeats_help="runs per row (3)",
        tmp_dir=None,
        only=SYSTEMS,
        only_help="backends to run",
    )
    args = parser.parse_args(argv)
    tmp_root: Path = args.tmp_dir or Path(tempfile.gettempdir())
    s = Settings.quick() if args.quick else Settings.full(args.repeats)
    systems = args.only or list(SYSTEMS)
    res = Results(facts(tmp_root, systems), workload(s), notes=list(NOTES))
    for system in systems:
        run_system(system, s, tmp_root, res, _log)
    one, five, fifteen = os.getloadavg()
    res.facts.append(("Load average at the end", f"{one:.2f}, {five:.2f}, {fifteen:.2f}"))
    out = args.out
    if args.quick and out is None:
        out = Path(tempfile.gettempdir()) / "sqs-quick.md"
    write_report("sqs", render(res, systems, list(s.clients)), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
