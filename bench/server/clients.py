"""The clients of ``bench.server``: closed-loop threads, each doing one operation after
another for a fixed time, over HTTP (the standard library's ``http.client``, one keep-alive
connection per thread; ``httpx.Client`` for comparison on the floor) or through sluice's
Python API in this process.

An operation returns how many messages it moved: enqueue 1 or 10, lease + ack (two
requests) or ``get()`` + ``ack()`` of one. 0 means the queue ran dry: that thread stops.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sluice
from bench.harness import make_bodies
from bench.server.floor import FLOOR_PATH
from bench.server.procs import cpu_seconds, rabbit_auth

__all__ = [
    "BACKLOG_BODY",
    "QUEUE",
    "RABBIT_QUEUE",
    "Factory",
    "HttpClient",
    "Op",
    "Run",
    "drive",
    "enqueue_op",
    "floor_ops",
    "in_process_ops",
    "payload",
    "rabbit_ops",
    "sluice_ops",
]

QUEUE = "bench"
RABBIT_QUEUE = "bench_server"

Op = Callable[[], int]
Factory = Callable[[], tuple[Op, Callable[[], None]]]
"""Makes one client's operation and the function that closes what it opened."""

_BODIES: list[dict[str, object]] = make_bodies(10)


def payload(size: int) -> bytes:
    """The body of an enqueue request of ``size`` (1 or 10) messages of about 100 bytes."""
    return json.dumps({"messages": [{"body": b} for b in _BODIES[:size]]}).encode()


BACKLOG_BODY = json.dumps(_BODIES[0]).encode()
"""One message's body, as RabbitMQ's publish row sends it."""
_ONE = payload(1)
_TEN = payload(10)
_LEASE = json.dumps({"limit": 1, "wait": 0}).encode()
_JSON = {"Content-Type": "application/json"}


@dataclass
class Run:
    """One timed run of ``clients`` threads."""

    ops: int = 0
    messages: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    server_cpu: float | None = None
    client_cpu: float = 0.0
    dry: bool = False


class _Clients:
    """The threads of one run and what they report."""

    def __init__(self, make: Factory, clients: int, warmup: int) -> None:
        self.make = make
        self.warmup = warmup
        self.ready = threading.Barrier(clients + 1)
        self.start = threading.Event()
        self.deadline = 0.0
        self.lock = threading.Lock()
        self.run = Run()
        self.ends: list[float] = []
        self.failures: list[BaseException] = []

    def client(self) -> None:
        op, close = self.make()
        mine: list[float] = []
        moved = 0
        end = 0.0
        try:
            for _ in range(self.warmup):
                op()
            self.ready.wait()
            self.start.wait()
            while (t0 := time.perf_counter()) < self.deadline:
                got = op()
                end = time.perf_counter()
                if got == 0:
                    self.run.dry = True
                    break
                mine.append(end - t0)
                moved += got
        except BaseException as exc:
            self.failures.append(exc)
            self.ready.abort()
        finally:
            close()
        with self.lock:
            self.run.latencies += mine
            self.run.messages += moved
            self.run.ops += len(mine)
            self.ends.append(end)


def drive(make: Factory, clients: int, seconds: float, warmup: int, server_pid: int | None) -> Run:
    """``clients`` threads doing ``make``'s operation for ``seconds`` after ``warmup``
    untimed operations each; the CPU time of the serving process (``server_pid``) and of
    this one (the clients, and the whole work for the in-process API) over the run."""
    c = _Clients(make, clients, warmup)
    threads = [threading.Thread(target=c.client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        c.ready.wait()
    server0 = None if server_pid is None else cpu_seconds(server_pid)
    client0 = time.process_time()
    began = time.perf_counter()
    c.deadline = began + seconds
    c.start.set()
    for t in threads:
        t.join()
    if c.failures:
        raise c.failures[0]
    run = c.run
    run.client_cpu = time.process_time() - client0
    if server_pid is not None and server0 is not None:
        run.server_cpu = cpu_seconds(server_pid) - server0
    run.seconds = max(c.ends, default=began) - began
    return run


# ---------------------------------------------------------------------- HTTP


class HttpClient:
    """One keep-alive connection; a request is sent and its whole answer read."""

    def __init__(self, port: int, headers: dict[str, str]) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {**_JSON, **headers}

    def post(self, path: str, body: bytes, expect: int) -> bytes:
        self.conn.request("POST", path, body=body, headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status != expect:
            raise RuntimeError(f"POST {path}: {response.status} {data[:300]!r}")
        return data


def enqueue_op(port: int, auth: dict[str, str], path: str, body: bytes, n: int) -> Factory:
    """One client's ``POST {path}/messages`` of ``body`` (``n`` messages) to sluice's API."""

    def make() -> tuple[Op, Callable[[], None]]:
        c = HttpClient(port, auth)

        def op() -> int:
            c.post(f"{path}/messages", body, 201)
            return n

        return op, c.conn.close

    return make


def sluice_ops(port: int, secret: str) -> dict[str, Factory]:
    """The HTTP API's workloads: enqueue 1, enqueue 10, lease (limit 1) + ack."""
    auth = {"Authorization": f"Bearer {secret}"}
    path = f"/api/queues/{QUEUE}"

    def enqueue(body: bytes, n: int) -> Factory:
        return enqueue_op(port, auth, path, body, n)

    def lease_ack() -> tuple[Op, Callable[[], None]]:
        c = HttpClient(port, auth)

        def op() -> int:
            taken = json.loads(c.post(f"{path}/leases", _LEASE, 200))["messages"]
            if not taken:
                return 0
            c.post(f"/api/leases/{taken[0]['token']}/ack", b"", 204)
            return 1

        return op, c.conn.close

    return {"enqueue 1": enqueue(_ONE, 1), "enqueue 10": enqueue(_TEN, 10),
            "lease + ack": lease_ack}  # fmt: skip


def rabbit_ops(port: int) -> dict[str, Factory]:
    """RabbitMQ's management API: publish one persistent message to the default exchange;
    get one with ``ack_requeue_false`` (taken and acknowledged in one request)."""
    auth = {"Authorization": rabbit_auth()}
    publish = json.dumps({
        "properties": {"delivery_mode": 2, "content_type": "application/json"},
        "routing_key": RABBIT_QUEUE,
        "payload": json.dumps(_BODIES[0]),
        "payload_encoding": "string",
    }).encode()  # fmt: skip
    get = json.dumps({"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}).encode()

    def make_publish() -> tuple[Op, Callable[[], None]]:
        c = HttpClient(port, auth)

        def op() -> int:
            answer = json.loads(c.post("/api/exchanges/%2F/amq.default/publish", publish, 200))
            if not answer.get("routed"):
                raise RuntimeError(f"RabbitMQ did not route the message: {answer}")
            return 1

        return op, c.conn.close

    def make_get() -> tuple[Op, Callable[[], None]]:
        c = HttpClient(port, auth)

        def op() -> int:
            return len(json.loads(c.post(f"/api/queues/%2F/{RABBIT_QUEUE}/get", get, 200)))

        return op, c.conn.close

    return {"enqueue 1": make_publish, "get + ack": make_get}


def floor_ops(port: int) -> dict[str, Factory]:
    """The bare route, driven by http.client and, for comparison, by httpx.Client."""

    def plain() -> tuple[Op, Callable[[], None]]:
        c = HttpClient(port, {})

        def op() -> int:
            c.post(FLOOR_PATH, _ONE, 204)
            return 1

        return op, c.conn.close

    def by_httpx() -> tuple[Op, Callable[[], None]]:
        import httpx

        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=_JSON)

        def op() -> int:
            response = client.post(FLOOR_PATH, content=_ONE)
            if response.status_code != 204:
                raise RuntimeError(f"POST {FLOOR_PATH}: {response.status_code}")
            return 1

        return op, client.close

    return {"http.client": plain, "httpx.Client": by_httpx}


# ---------------------------------------------------------------------- in process


def in_process_ops(db: sluice.Database) -> dict[str, Factory]:
    """The same workloads through the Python API on one Database shared by the threads:
    ``put``, ``put_many`` of 10, ``get()`` + ``ack()``."""
    bodies: Sequence[Any] = _BODIES

    def make(kind: str) -> Factory:
        def factory() -> tuple[Op, Callable[[], None]]:
            q = db.queue(QUEUE)

            def put() -> int:
                q.put(bodies[0])
                return 1

            def put_many() -> int:
                return len(q.put_many(bodies))

            def get_ack() -> int:
                m = q.get()
                if m is None:
                    return 0
                m.ack()
                return 1

            ops: dict[str, Op] = {"enqueue 1": put, "enqueue 10": put_many,
                                  "lease + ack": get_ack}  # fmt: skip
            return ops[kind], lambda: None

        return factory

    return {kind: make(kind) for kind in ("enqueue 1", "enqueue 10", "lease + ack")}
