"""Node-to-node forwarding (sluice.gateways.http) for ``python -m bench gateways``: a
backlog of N messages in database A's outgoing http gateway ``outbox``, drained by
``db.gateways`` (a sender thread, as ``sluice run`` runs it) into the incoming http
gateway ``inbox`` of a real ``sluice serve`` of database B (a subprocess); against, in the
same run and on the same server, B's own enqueue rate at the same batch size (as many
messages per request, one client): ``POST /api/queues/bench/messages`` and
``POST /api/gateways/gwpost`` (with an Idempotency-Key, as forwarding sends one).

Then the sender's parts are timed on a second backlog: dequeue, deliver (the POST and
its answer) and commit, per message.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, cast

import sluice
from bench.harness import PG_CONNINFO, SchemaGuard, make_bodies
from bench.server.clients import QUEUE, Factory, HttpClient, Op, drive
from bench.server.procs import Server, cpu_seconds, sluice_serve
from sluice.gateways.manager import DEFAULT_POLL
from sluice.gateways.sender import Sender
from sluice.gateways.transports import Delivered, Outbound
from sluice.message import Message

__all__ = ["TARGET", "Forwarding", "Settings", "run_forwarding"]

TARGET = 0.5
"""Forwarding >= 0.5 x the receiving server's enqueue rate at the same batch size."""
INBOX = "inbox"
GWPOST = "gwpost"
OUTBOX = "outbox"
SYSTEMS = ("sqlite", "postgresql")


@dataclass(frozen=True)
class Settings:
    messages: int
    """The backlog forwarded per run."""
    repeats: int
    seconds: float
    """Length of one timed run of the server's own enqueue."""
    warmup: int
    parts: int
    """Messages of the backlog whose sender's parts are timed."""
    batches: tuple[int, ...] = (1,)
    """Messages per request (and per sender transaction): the gateway's ``batch``."""


@dataclass
class Forwarding:
    """One backend's figures, every run."""

    system: str
    batch: int
    enqueue: list[float] = field(default_factory=list)
    """POST /api/queues/bench/messages, ``batch`` messages per request, msgs/s."""
    gateway: list[float] = field(default_factory=list)
    """POST /api/gateways/gwpost (/batch above 1), ``batch`` messages per request, each
    with an Idempotency-Key, msgs/s."""
    forward: list[float] = field(default_factory=list)
    """First to last arrival at B, msgs/s."""
    wall: list[float] = field(default_factory=list)
    """From the senders' start to the last arrival, msgs/s."""
    sender_cpu: list[float] = field(default_factory=list)
    """The sending process's CPU per forwarded message, seconds."""
    server_cpu: list[float] = field(default_factory=list)
    """The receiving server's CPU per forwarded message, seconds."""
    parts: dict[str, float] = field(default_factory=dict)
    """Seconds per message of each part of the sender, over the timed backlog."""
    error: str = ""

    @property
    def ratio(self) -> float:
        return median(self.forward) / median(self.enqueue)


# ---------------------------------------------------------------------- the two nodes


@dataclass(frozen=True)
class Nodes:
    sender: str
    receiver: str
    secret: str


def _url(system: str, tmp: Path, name: str) -> str:
    if system == "sqlite":
        return f"sqlite:///{tmp / f'{name}.db'}"
    return f"{PG_CONNINFO}?schema=sluice_bench_fwd_{name}_{os.getpid()}"


@contextmanager
def nodes(system: str, tmp_root: Path) -> Iterator[Nodes]:
    """Fresh databases A (sender) and B (receiver): B with the queue ``bench`` and the
    incoming http gateways ``inbox`` and ``gwpost``, and a key that may produce into
    them; removed when the block ends."""
    from sluice.server.grants import Grant, Keys

    tmp = Path(tempfile.mkdtemp(prefix="bench-forward-", dir=tmp_root))
    a, b = _url(system, tmp, "a"), _url(system, tmp, "b")
    guards = [SchemaGuard(a), SchemaGuard(b)]
    try:
        with sluice.connect(b) as db:
            db.create_queue(QUEUE)
            db.gateways.define(INBOX, direction="in", transport="http")
            db.gateways.define(GWPOST, direction="in", transport="http")
            grants = [Grant.parse(f"{QUEUE}:produce,consume"), Grant.parse(f"{INBOX}:produce"),
                      Grant.parse(f"{GWPOST}:produce")]  # fmt: skip
            secret = Keys(db).add("bench", grants)
        with sluice.connect(a):
            pass
        yield Nodes(a, b, secret)
    finally:
        for guard in guards:
            guard.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def define_outbox(db: sluice.Database, port: int, secret: str, batch: int,
                  queue: str = OUTBOX) -> None:  # fmt: skip
    """A's outgoing http gateway into B's ``inbox``, with B's key (as in
    tests/contract/test_gateways_forward.py)."""
    db.gateways.define(queue, direction="out", transport="http", backoff=0.05, batch=batch,
                       url=f"http://127.0.0.1:{port}/api/gateways/{INBOX}",
                       header_authorization=f"Bearer {secret}")  # fmt: skip


def backlog(db: sluice.Database, queue: str, n: int) -> None:
    """``n`` messages of about 100 bytes (the server bench's bodies), numbered."""
    bodies = make_bodies(n)
    for i, body in enumerate(bodies):
        body["n"] = i
    for start in range(0, n, 500):
        db.queue(queue).put_many(bodies[start : start + 500])


# ---------------------------------------------------------------------- the server's own rate


_BODIES = make_bodies(1000)


def enqueue_ops(port: int, secret: str, batch: int) -> Factory:
    """One client enqueueing ``batch`` messages per request into the queue ``bench``."""
    body = json.dumps({"messages": [{"body": b} for b in _BODIES[:batch]]}).encode()

    def make() -> tuple[Op, Callable[[], None]]:
        c = HttpClient(port, {"Authorization": f"Bearer {secret}"})

        def op() -> int:
            c.post(f"/api/queues/{QUEUE}/messages", body, 201)
            return batch

        return op, c.conn.close

    return make


def gateway_ops(port: int, secret: str, batch: int) -> Factory:
    """One client posting into the incoming gateway ``gwpost``, each message with an
    Idempotency-Key of its own (what a forwarding sender sends): one per request to
    ``/api/gateways/gwpost``, or ``batch`` per request to its ``/batch``."""
    counter = itertools.count()
    lock = threading.Lock()
    raw = [json.dumps(b).encode() for b in _BODIES[:batch]]
    encoded = [base64.b64encode(r).decode() for r in raw]

    def keys() -> list[str]:
        with lock:
            return [f"bench-{os.getpid()}-{next(counter)}" for _ in range(batch)]

    def make() -> tuple[Op, Callable[[], None]]:
        c = HttpClient(port, {"Authorization": f"Bearer {secret}"})

        def one() -> int:
            c.headers["Idempotency-Key"] = keys()[0]
            c.post(f"/api/gateways/{GWPOST}", raw[0], 201)
            return 1

        def many() -> int:
            entries = [{"key": k, "body": b, "content_type": "application/json",
                        "properties": {}, "priority": 0}
                       for k, b in zip(keys(), encoded, strict=True)]  # fmt: skip
            c.post(f"/api/gateways/{GWPOST}/batch", json.dumps({"messages": entries}).encode(),
                   200)  # fmt: skip
            return batch

        return (one if batch == 1 else many), c.conn.close

    return make


def own_rates(server: Server, secret: str, batch: int, s: Settings) -> tuple[float, float]:
    """(enqueue, gateway post) msgs/s of one client on ``server``, ``batch`` per request."""
    enqueue = drive(enqueue_ops(server.port, secret, batch), 1, s.seconds, s.warmup, server.pid)
    gateway = drive(gateway_ops(server.port, secret, batch), 1, s.seconds, s.warmup, server.pid)
    return enqueue.messages / enqueue.seconds, gateway.messages / gateway.seconds


# ---------------------------------------------------------------------- forwarding


def _arrived(db: sluice.Database) -> int:
    return int(db.queue(INBOX).stats()["ready"])


def forward(nodes: Nodes, server: Server, n: int, res: Forwarding) -> None:
    """One run: a backlog of ``n`` in A's ``outbox`` sent by ``db.gateways.start()``;
    every message checked at B, once and in order."""
    with sluice.connect(nodes.sender) as a, sluice.connect(nodes.receiver) as b:
        define_outbox(a, server.port, nodes.secret, res.batch)
        backlog(a, OUTBOX, n)
        server0, sender0 = cpu_seconds(server.pid), time.process_time()
        began = time.time()
        a.gateways.start(poll=DEFAULT_POLL)
        try:
            deadline = time.monotonic() + 600
            while _arrived(b) < n:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {_arrived(b)} of {n} arrived in 600 s")
                time.sleep(0.25)  # a look costs the sender's process CPU: seldom
        finally:
            a.gateways.stop()
        sender_cpu, server_cpu = time.process_time() - sender0, cpu_seconds(server.pid) - server0
        got = b.queue(INBOX).browse(limit=n + 10)
    numbers = [m.body["n"] for m in got]
    if numbers != list(range(n)):
        raise RuntimeError(f"forwarded {len(numbers)} of {n}, not each once in order")
    first, last = got[0].enqueued, got[-1].enqueued
    res.forward.append((n - 1) / (last - first))
    res.wall.append(n / (last - began))
    res.sender_cpu.append(sender_cpu / n)
    res.server_cpu.append(server_cpu / n)


# ---------------------------------------------------------------------- the sender's parts


class _Clock:
    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def timed(self, part: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.spent[part] = self.spent.get(part, 0.0) + time.perf_counter() - t0

        return run


class _TimedTx:
    """A transaction whose dequeue and commit are timed."""

    def __init__(self, tx: Any, clock: _Clock) -> None:
        self._tx = tx
        self.dequeue = clock.timed("dequeue", tx.dequeue)
        self.commit = clock.timed("commit", tx.commit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)


class _TimedDb:
    """The engine as the sender sees it, its transactions' start timed."""

    def __init__(self, db: sluice.Database, clock: _Clock) -> None:
        self._db = db
        self._clock = clock
        self._begin = clock.timed("begin", db.transaction)

    def transaction(self) -> _TimedTx:
        return _TimedTx(self._begin(), self._clock)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


class _TimedOut:
    """The transport, its deliveries timed (one message, or a batch's request)."""

    def __init__(self, out: Outbound, clock: _Clock) -> None:
        self._deliver = clock.timed("deliver (POST + answer)", out.deliver)
        self.close = out.close
        many = getattr(out, "deliver_many", None)
        if many is not None:
            self.deliver_many = clock.timed("deliver (POST + answer)", many)

    def deliver(self, message: Message) -> Delivered | None:
        answer: Delivered | None = self._deliver(message)
        return answer


def time_parts(nodes: Nodes, server: Server, n: int, res: Forwarding) -> None:
    """A sender of its own (the one ``db.gateways`` makes) run in this thread over a
    backlog of ``n``, its engine and transport wrapped to time each part."""
    from sluice.gateways.registry import transport

    queue = f"{OUTBOX}_parts"
    with sluice.connect(nodes.sender) as a:
        define_outbox(a, server.port, nodes.secret, res.batch, queue)
        backlog(a, queue, n)
        gateway = a.gateways.get(queue)
        assert gateway is not None
        made = transport(gateway).outbound
        assert made is not None
        clock = _Clock()
        engine = cast(Any, _TimedDb(a, clock))
        sender = Sender(engine, gateway, _TimedOut(made(a, gateway), clock), threading.Event())
        t0 = time.perf_counter()
        try:
            sent = 0
            while done := sender.send():
                sent += done
        finally:
            sender.close()
        total = time.perf_counter() - t0
    res.parts = {part: spent / sent for part, spent in clock.spent.items()}
    res.parts["other (the sender's own)"] = (total - sum(clock.spent.values())) / sent
    res.parts["total"] = total / sent


# ---------------------------------------------------------------------- a backend


def run_forwarding(system: str, s: Settings, tmp_root: Path,
                   log: Callable[[str], None]) -> list[Forwarding]:  # fmt: skip
    """Per batch size, ``s.repeats`` runs of: the server's own rates, then forwarding,
    on fresh nodes (one server per run); then the sender's parts on the last run's."""
    rows = []
    for batch in s.batches:
        res = Forwarding(system, batch)
        rows.append(res)
        try:
            for run in range(s.repeats):
                with nodes(system, tmp_root) as where, sluice_serve(where.receiver) as server:
                    enqueue, gateway = own_rates(server, where.secret, batch, s)
                    res.enqueue.append(enqueue)
                    res.gateway.append(gateway)
                    forward(where, server, s.messages, res)
                    log(f"{system} batch {batch} run {run + 1}: enqueue {enqueue:,.0f}, "
                        f"gateway post {gateway:,.0f}, forwarding {res.forward[-1]:,.0f} "
                        "msgs/s")  # fmt: skip
                    if run == s.repeats - 1 and s.parts:
                        time_parts(where, server, s.parts, res)
        except Exception as exc:  # reported in its row; the others go on
            from bench.harness import one_line

            res.error = one_line(exc)
            log(f"{system} batch {batch}: {res.error}")
    return rows


# ---------------------------------------------------------------------- the report


def _fmt(values: list[float]) -> str:
    if not values:
        return "-"
    spread = f" ({min(values):,.0f}-{max(values):,.0f})" if len(values) > 1 else ""
    return f"{median(values):,.0f}{spread}"


def render(rows: list[Forwarding], s: Settings, facts: list[tuple[str, str]],
           notes: list[str]) -> str:  # fmt: skip
    lines = ["# Gateways: node-to-node forwarding over HTTP (sluice.gateways.http)", "",
             "## Machine", ""]  # fmt: skip
    lines += [f"- {key}: {value}" for key, value in facts]
    lines += [
        "",
        "## Workload",
        "",
        f"- Forwarding: a backlog of {s.messages:,} JSON messages of about 100 bytes in "
        f"database A's outgoing http gateway `{OUTBOX}`, sent by `db.gateways.start()` (as "
        "`sluice run` runs it: a pipeline, one transaction delivered by a courier thread "
        "while the sender's thread commits the one before and takes the next; `http.client`, "
        "one keep-alive connection) "
        f"to the incoming http gateway `{INBOX}` of a real `sluice serve` of database B (a "
        "subprocess, its CLI, uvicorn, an API key sent by the gateway's "
        "`header_authorization`). Batch size 1: the sender takes one message per "
        "transaction, POSTs it with its id as `Idempotency-Key`, and commits when B has "
        "answered 201 (B stored it once, with its idempotency record, in one commit). "
        "msgs/s from the first to the last arrival at B (the messages' `enqueued` time "
        "there); *wall* counts from the sender's start. Every message is checked at B: all "
        "there, each once, in A's order. The bench's process (A's) looks at B's count every "
        "0.25 s.",
        f"- B's own enqueue rate, in the same run, on the same server, at the same batch "
        "size: one client (`http.client`, one keep-alive connection), as many messages per "
        f"request as the batch, closed loop for {s.seconds:g} s after {s.warmup} untimed "
        f"requests: `POST /api/queues/{QUEUE}/messages`, and `POST /api/gateways/{GWPOST}` "
        "(at batch 1) or its `/batch` with an Idempotency-Key per message (what the "
        "forwarding sender sends).",
        f"- {s.repeats} run(s) per backend, each on fresh databases and a fresh server; "
        "the median, (min-max) beside it.",
        "- Durability: SQLite synchronous=FULL on both A and B (an fsync per commit); "
        "PostgreSQL as the settings above (synchronous_commit read back), A and B private "
        "schemas of one server. A and B on one machine: the sender, the server and the "
        "database share its cores.",
        "",
        "## Results (msgs/s)",
        "",
        "| store | batch | enqueue (queue) | post (gateway, keys) | forwarding | forwarding (wall) "
        "| forwarding / enqueue | forwarding / gateway post | sender CPU / msg | "
        "server CPU / msg |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.error:
            lines.append(f"| {r.system} | {r.batch} | not measured: {r.error} | | | | | | | |")
            continue
        lines.append(
            f"| {r.system} | {r.batch} | {_fmt(r.enqueue)} | {_fmt(r.gateway)} | "
            f"{_fmt(r.forward)} | "
            f"{_fmt(r.wall)} | {r.ratio:.2f} | "
            f"{median(r.forward) / median(r.gateway):.2f} | "
            f"{median(r.sender_cpu) * 1e6:,.0f} us | {median(r.server_cpu) * 1e6:,.0f} us |"
        )
    lines += ["", "## Target", ""]
    for r in rows:
        if r.error:
            lines.append(f"- not measured: {r.system}, batch {r.batch} ({r.error})")
            continue
        verdict = "PASS" if r.ratio >= TARGET else "MISS"
        lines.append(f"- {verdict}: {r.system}, batch size {r.batch}: forwarding {r.ratio:.2f} x "
                     f"the receiving server's enqueue rate (target >= {TARGET})")  # fmt: skip
    timed = [r for r in rows if r.parts]
    if timed:
        lines += ["", f"## The sender's parts (us per message, {s.parts:,} messages; "
                  "`Sender.send`, one transaction after the other, not the pipeline)", "",
                  "| part | " + " | ".join(f"{r.system}, batch {r.batch}" for r in timed) + " |",
                  "|---|" + "---|" * len(timed)]  # fmt: skip
        for part in timed[0].parts:
            cells = " | ".join(f"{r.parts.get(part, 0.0) * 1e6:,.0f}" for r in timed)
            lines.append(f"| {part} | {cells} |")
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"
