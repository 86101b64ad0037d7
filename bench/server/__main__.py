"""The HTTP server against sluice's Python API, RabbitMQ's HTTP API and a bare Starlette route.

Run: ``python -m bench server`` (``--quick`` for a smoke run of seconds, ``--only sqlite`` or
``--only postgresql``). The targets of the server's issue, in one run on the same machine:

1. Enqueue 1 message per request, a batch of 10 per request, and lease (limit 1) + ack per
   message, through a real ``sluice serve`` (its CLI, uvicorn, an API key) in a process of
   its own, against the same operations through ``db.queue(q)`` in this process (``put``,
   ``put_many`` of 10, ``get()`` + ``ack()``) on the same database: a SQLite file (sluice's
   default durability, synchronous=FULL) and PostgreSQL (127.0.0.1:5432, database ``test``,
   schema ``bench_server`` made fresh and dropped after).
2. RabbitMQ's management API (its plugin enabled if it is off): publish of a persistent
   message to a durable queue, and get with ``ack_requeue_false``.
3. A bare Starlette route answering 204 on uvicorn: the framework's floor.

1 and 16 concurrent clients: threads with one keep-alive connection each, runs of fixed
length, in-process and HTTP interleaved. Then the parts of an HTTP enqueue are timed alone
(bench/server/profile.py), and the web console's page load with 100 queues
(bench/server/console.py, target <= 300 ms). Writes ``bench/results/server-<date>.md``
(``--quick``: the temp directory unless ``--out``).
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
    RABBIT_HOST,
    add_common_options,
    drop_schema,
    one_line,
    package_versions,
    rabbit_params,
    store_facts,
    write_report,
)
from bench.server.clients import (
    BACKLOG_BODY,
    QUEUE,
    RABBIT_QUEUE,
    Factory,
    drive,
    floor_ops,
    in_process_ops,
    rabbit_ops,
    sluice_ops,
)
from bench.server.console import measure_console
from bench.server.procs import (
    LOG_LEVEL,
    RABBIT_API_PORT,
    beam_pid,
    ensure_management,
    floor,
    least,
    sluice_serve,
)
from bench.server.profile import measure_parts
from bench.server.report import FLOOR, HTTP, IN_PROCESS, LEAST, RABBIT, Results, Row, render

SYSTEMS = ("sqlite", "postgresql")
SCHEMA = "bench_server"
WORKLOADS = ("enqueue 1", "enqueue 10", "lease + ack")
_PACKAGES = ("sluice", "fastapi", "starlette", "uvicorn", "pydantic", "h11", "httptools",
             "uvloop", "httpx", "psycopg", "pika")  # fmt: skip

Log = Callable[[str], None]

NOTES = [
    "**The server is bound by its one core.** At 16 clients the serving process is at one "
    "core (its *serving CPU* per message times msgs/s), and tops out near 1 / its CPU per "
    "request: one process, one GIL, one core of two, the other shared by the clients and "
    "the database.",
    "**What serves an enqueue now** (since 2026-11-25, second round): the enqueue and ack "
    "routes are answered by `server/hot.py` before FastAPI's routing and dependency "
    "solving (the same endpoint functions, still documented by their FastAPI routes); the "
    "route validates its own body, takes its key from memory (`grants.REMEMBER`, 1 s), "
    "and hands one `put_many` (a batch of one set of options; several: one transaction) "
    "to the app's own 8 threads (`server/offload.py`, a bare `run_in_executor`: anyio's "
    "pool costs the loop twice as much per call). The console's sampler, which counts "
    "every queue by state, keeps within 2% of the time: with the bench's backlog of "
    "millions one sample takes a good part of a second, and on SQLite it holds the "
    "database's one connection meanwhile (before, it ran every 2 s whatever it cost).",
    "**The least server is the bound.** `bench/server/least.py` does only what no HTTP "
    "enqueue can skip: read the body, validate it as sluice's `Enqueue`, hand `put_many` "
    "to a thread, answer the ids; no keys, metrics, size limit or routing. With one client "
    "it reaches 0.30-0.43 x `put_many(10)` on SQLite (the two runs of 2026-11-25): the "
    "loopback round trip, uvicorn's "
    "parsing and writing, the client's own CPU, the validation and the thread hop come to "
    "about twice the in-process call, whose durable commit costs 0.5 ms here. No server "
    "over sluice on this stack reaches 0.5 x with one client on SQLite; `sluice serve` is "
    "at the least server's rate (HTTP / least: about 1.0). With 16 clients the server is "
    "bound by one process's GIL: the least server reaches about 0.55 x, `sluice serve` "
    "about 0.65 of the least server (its keys, metrics, size limit and problem handling "
    "cost about 170 us of CPU per request, measured as ASGI calls). Two `sluice serve` "
    "processes on one SQLite file do not serve more than one (measured: 5.8-7.0k against "
    "6.3-6.4k msgs/s): their writers meet on SQLite's lock, whose busy handler sleeps. On "
    "PostgreSQL two processes serve 35-50% more, and one already meets the 16-client "
    "target.",
    "**Lease + ack** is two requests per message, each lease taking its message in a "
    "transaction of its own.",
    "**RabbitMQ's management API** is an operator's tool in its own docs (HTTP 'not ideal "
    "for high performance publishing'; get 'should be treated as a sysadmin's tool'). "
    "Whether its HTTP publish waits for a publisher confirm was not checked. Between its "
    "publish and its get rows the bench puts a backlog in its queue by AMQP (untimed), so "
    "that get has messages.",
    "uvicorn ran with `--log-level warning`: no access-log line per request. The default "
    "(`info`) writes one per request; its cost was not measured here.",
]


@dataclass(frozen=True)
class Settings:
    seconds: float
    """Length of one timed run."""
    repeats: int
    warmup: int
    """Untimed operations per client before each run."""
    clients: tuple[int, ...]
    parts_n: int
    """Calls per part in the timing of an enqueue's parts."""
    rabbit_backlog: int
    """Messages put in RabbitMQ's queue (by AMQP, untimed) before each round of its get
    rows, so that they do not run dry."""

    @classmethod
    def full(cls, repeats: int) -> Settings:
        return cls(seconds=2.0, repeats=repeats, warmup=10, clients=(1, 16), parts_n=400,
                   rabbit_backlog=5_000)  # fmt: skip

    @classmethod
    def quick(cls) -> Settings:
        return cls(seconds=0.3, repeats=1, warmup=2, clients=(1, 16), parts_n=30,
                   rabbit_backlog=1_000)  # fmt: skip


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Place:
    """The bench's database on one system, with its queue and an API key for it."""

    system: str
    url: str
    secret: str


@contextlib.contextmanager
def fresh(system: str, tmp_root: Path) -> Iterator[Place]:
    """A new database with the queue ``bench`` and a key that may produce and consume it;
    removed when the block ends."""
    from sluice.server.grants import Grant, Keys

    tmp: Path | None = None
    if system == "sqlite":
        tmp = Path(tempfile.mkdtemp(prefix="bench-server-", dir=tmp_root))
        url = f"sqlite:///{tmp / 'server.db'}"
    elif system == "postgresql":
        url = f"{PG_CONNINFO}?schema={SCHEMA}"
        drop_schema(PG_CONNINFO, SCHEMA)
    else:
        raise ValueError(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")
    try:
        with sluice.connect(url) as db:
            db.create_queue(QUEUE)
            secret = Keys(db).add("bench", [Grant.parse(f"{QUEUE}:produce,consume")])
        yield Place(system, url, secret)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            drop_schema(PG_CONNINFO, SCHEMA)


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


def _failed(rows: list[Row], exc: BaseException, log: Log) -> list[Row]:
    for row in rows:
        row.error = row.error or one_line(exc)
    log(f"{rows[0].system}: {one_line(exc)}" if rows else one_line(exc))
    return rows


def run_system(system: str, s: Settings, tmp_root: Path, res: Results, log: Log) -> None:
    """In-process, HTTP and (for enqueues) least-server rows of one backend, interleaved;
    then the enqueue's parts."""
    rows: list[list[Row]] = []
    for w in WORKLOADS:
        for c in s.clients:
            group = [Row(system, IN_PROCESS, w, c),
                     Row(system, HTTP, w, c, 2 if w == "lease + ack" else 1)]  # fmt: skip
            if w.startswith("enqueue"):
                group.append(Row(system, LEAST, w, c))
            rows.append(group)
    res.rows += [r for group in rows for r in group]
    try:
        with fresh(system, tmp_root) as place, sluice.connect(place.url) as db:
            with sluice_serve(place.url) as server, least(place.url) as bound:
                ops = {IN_PROCESS: (in_process_ops(db), os.getpid()),
                       HTTP: (sluice_ops(server.port, place.secret), server.pid),
                       LEAST: (sluice_ops(bound.port, place.secret), bound.pid)}  # fmt: skip
                for _ in range(s.repeats):
                    for group in rows:
                        for row in group:
                            made, pid = ops[row.api]
                            _measure(row, made[row.workload], s, pid, log)
            try:
                res.parts[system] = measure_parts(db, place.secret, s.parts_n)
            except Exception as exc:  # the figures stand without it
                res.parts_errors[system] = one_line(exc)
    except Exception as exc:
        _failed([r for group in rows for r in group], exc, log)


def run_console(system: str, tmp_root: Path, res: Results, log: Log) -> None:
    """The console's page load with 100 queues: a note of the report."""
    try:
        with fresh(system, tmp_root) as place:
            load = measure_console(system, place.url)
        res.console[system] = (load.http_p50_ms, load.browser_p50_ms)
        line = load.line()
    except Exception as exc:  # the other figures stand without it
        line = f"**Console page, {system}**: not measured ({one_line(exc)})."
    res.notes.append(line)
    log(line)


def run_rabbit(s: Settings, res: Results, log: Log) -> None:
    import pika

    rows = [Row("rabbitmq", RABBIT, w, c) for w in ("enqueue 1", "get + ack") for c in s.clients]
    res.rows += rows
    try:
        res.facts.insert(-1, ("RabbitMQ", ensure_management()))
        conn = pika.BlockingConnection(rabbit_params())
        try:
            channel = conn.channel()
            channel.queue_delete(RABBIT_QUEUE)
            channel.queue_declare(RABBIT_QUEUE, durable=True)
            ops = rabbit_ops(RABBIT_API_PORT)
            persistent = pika.BasicProperties(delivery_mode=2)
            for _ in range(s.repeats):
                for row in rows:
                    if row is rows[len(s.clients)]:  # the first get row: a backlog first
                        for _ in range(s.rabbit_backlog):
                            channel.basic_publish("", RABBIT_QUEUE, BACKLOG_BODY, persistent)
                    _measure(row, ops[row.workload], s, beam_pid(), log)
            channel.queue_delete(RABBIT_QUEUE)
        finally:
            conn.close()
    except Exception as exc:
        _failed(rows, exc, log)


def run_floor(s: Settings, res: Results, log: Log) -> None:
    rows = [Row("floor", FLOOR, k, c) for k in ("http.client", "httpx.Client") for c in s.clients]
    res.rows += rows
    try:
        with floor() as server:
            ops = floor_ops(server.port)
            for _ in range(s.repeats):
                for row in rows:
                    _measure(row, ops[row.workload], s, server.pid, log)
    except Exception as exc:
        _failed(rows, exc, log)


# ---------------------------------------------------------------------- the report


def load_average(when: str) -> tuple[str, str]:
    """The machine's load (1, 5, 15 minutes): other work on its 2 cores moves every figure."""
    one, five, fifteen = os.getloadavg()
    return (f"Load average {when}", f"{one:.2f}, {five:.2f}, {fifteen:.2f}")


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def facts(tmp_root: Path, systems: Sequence[str]) -> list[tuple[str, str]]:

    loop = "uvloop" if _importable("uvloop") else "asyncio"
    parser = "httptools" if _importable("httptools") else "h11 (pure Python; httptools absent)"
    rows = store_facts(tmp_root, systems)
    rows += [
        (
            "Server",
            f"`sluice serve --db URL --log-level {LOG_LEVEL}`: one uvicorn process, one worker,"
            f" event loop {loop}, HTTP parser {parser} (uvicorn's 'auto' choices); FastAPI runs"
            " the sync routes and the key dependency in its thread pool",
        ),
        ("Packages", package_versions(_PACKAGES)),
        load_average("at the start"),
    ]
    return rows


def workload(s: Settings) -> list[str]:
    return [
        f"Each row is {s.repeats} run(s) of {s.seconds:g} s of closed-loop clients (each does "
        f"its next operation as soon as the last one answered), after {s.warmup} untimed "
        "operations per client; msgs/s is the median of the runs, latencies (one operation, "
        "as the client sees it) are pooled over them. In-process and HTTP rows alternate, "
        "on one queue `bench` of one database.",
        "",
        "- **HTTP**: a real `sluice serve` in a process of its own, with an API key "
        f"(`{QUEUE}:produce,consume`, `Authorization: Bearer`): `POST /api/queues/bench/"
        "messages` with 1 or 10 messages of about 100 bytes (one transaction per request); "
        '`POST /api/queues/bench/leases` `{"limit": 1, "wait": 0}` then `POST /api/leases/'
        "{token}/ack` per message (two requests; latency of the pair).",
        "- **in-process**: `db.queue('bench')` in the bench's process on the same database "
        "(one `Database` shared by the client threads): `put(body)`, `put_many(10 bodies)`, "
        "`get()` + `ack()`.",
        f"- **RabbitMQ management API** (127.0.0.1:{RABBIT_API_PORT}, HTTP Basic): `POST "
        f"/api/exchanges/%2F/amq.default/publish` to the durable classic queue `{RABBIT_QUEUE}`"
        " (declared with pika), `delivery_mode` 2; `POST /api/queues/%2F/bench_server/get` "
        '`{"count": 1, "ackmode": "ack_requeue_false"}`. It has no batch publish, so no '
        "batch row.",
        "- **Floor**: a Starlette route that reads the body (the enqueue-1 request's) and "
        "answers 204, on uvicorn in a process of its own with the same settings; driven by "
        "the bench's client and by `httpx.Client` to show the clients' own cost.",
        "",
        "Clients: threads in the bench's process, each with one keep-alive connection of the "
        "standard library's `http.client` (its CPU per request is in the tables). "
        "`httpx.Client` costs several times more CPU per request (the floor's rows): with it, "
        "on 2 cores, the bench would measure the client. Client and server share the 2 cores: "
        "the server can have at most about one (one process, one GIL), the client the other. "
        "*Serving CPU* is the CPU time of the process that serves (sluice serve, the floor, "
        "RabbitMQ's beam.smp, or the bench's own process for in-process rows, clients "
        "included) per message; PostgreSQL's own backends are not counted.",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    first_line = __doc__.splitlines()[0]
    parser = argparse.ArgumentParser(prog="python -m bench server", description=first_line)
    add_common_options(
        parser,
        quick="a smoke run of seconds",
        repeats=3,
        repeats_help="runs per row (3)",
        tmp_dir=None,
        only=SYSTEMS,
        only_help="backends to run",
    )
    parser.add_argument("--console-only", action="store_true",
                        help="only the console's page load with 100 queues, printed")  # fmt: skip
    args = parser.parse_args(argv)
    tmp_root: Path = args.tmp_dir or Path(tempfile.gettempdir())
    s = Settings.quick() if args.quick else Settings.full(args.repeats)
    systems = args.only or list(SYSTEMS)
    if args.console_only:
        for system in systems:
            run_console(system, tmp_root, Results([], [], notes=[]), _log)
        return 0
    res = Results(facts(tmp_root, systems), workload(s), notes=list(NOTES))
    _log(f"RabbitMQ at {RABBIT_HOST}; clients {s.clients}; {s.seconds:g} s per run")
    for system in systems:
        run_system(system, s, tmp_root, res, _log)
        run_console(system, tmp_root, res, _log)
    run_rabbit(s, res, _log)
    run_floor(s, res, _log)
    res.facts.append(load_average("at the end"))
    out = args.out
    if args.quick and out is None:
        out = Path(tempfile.gettempdir()) / "server-quick.md"
    write_report("server", render(res, systems, list(s.clients)), out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
