"""Where an HTTP enqueue's time goes, for ``bench.server``: the parts a request to
``POST /api/queues/{name}/messages`` passes through, each timed alone in this process on
the bench's database, one caller, median of many calls (wall time, fsync included).

- the whole app called as ASGI (no socket, no uvicorn, no HTTP parsing), with keys and
  without (``create_app(db, auth=False)``), and the bare Starlette floor the same way;
- a key's read from the store (``Keys.authenticate``: SHA-256 of the secret and a read by
  its hash), which the server makes once a second per key (``grants.REMEMBER``);
- the body's validation (``Enqueue.model_validate_json``);
- the route's transaction (its ``put_many``, commit).

Set against the request's latency over HTTP, the rest is uvicorn, loopback and the
client.
"""

from __future__ import annotations

import asyncio
import hashlib
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import sluice
from bench.server.clients import QUEUE, payload
from bench.server.floor import FLOOR_PATH
from bench.server.floor import app as floor_app

__all__ = ["Parts", "measure_parts"]


@dataclass(frozen=True)
class Parts:
    """Median microseconds of each part, for batches of 1 and of 10 messages."""

    app: dict[int, float]
    app_no_auth: dict[int, float]
    floor_app: float
    sha256: float
    authenticate: float
    validate: dict[int, float]
    transaction: dict[int, float]


def _median_us(fn: Callable[[], object], n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


async def _amedian_us(fn: Callable[[], Awaitable[object]], n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


def _asgi_call(app: Any, path: str, body: bytes, secret: str) -> Callable[[], Awaitable[int]]:
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]  # fmt: skip
    if secret:
        headers.append((b"authorization", f"Bearer {secret}".encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8080)}  # fmt: skip

    async def call() -> int:
        given = False
        status = 0

        async def receive() -> dict[str, Any]:
            nonlocal given
            if given:
                return {"type": "http.disconnect"}
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await app(dict(scope), receive, send)
        if status not in (201, 204):
            raise RuntimeError(f"POST {path} called as ASGI: {status}")
        return status

    return call


def measure_parts(db: sluice.Database, secret: str, n: int) -> Parts:
    """Each part ``n`` times (after n // 10 untimed) on ``db``'s queue ``bench``."""
    from sluice.server.app import create_app
    from sluice.server.grants import Keys
    from sluice.server.messages import _enqueue as route_transaction
    from sluice.server.models import Enqueue

    warm = max(n // 10, 1)
    path = f"/api/queues/{QUEUE}/messages"
    keys = Keys(db)

    async def apps() -> tuple[dict[str, dict[int, float]], float]:
        with_keys, without = create_app(db), create_app(db, auth=False)
        timed: dict[str, dict[int, float]] = {"keys": {}, "none": {}}
        try:
            for size in (1, 10):
                for label, app, key in (("keys", with_keys, secret), ("none", without, "")):
                    call = _asgi_call(app, path, payload(size), key)
                    for _ in range(warm):
                        await call()
                    timed[label][size] = await _amedian_us(call, n)
            floor = _asgi_call(floor_app, FLOOR_PATH, payload(1), "")
            for _ in range(warm):
                await floor()
            floor_us = await _amedian_us(floor, n)
        finally:
            await with_keys.state.leases.close()
            await without.state.leases.close()
        return timed, floor_us

    timed, floor_us = asyncio.run(apps())
    validate: dict[int, float] = {}
    transaction: dict[int, float] = {}
    for size in (1, 10):
        body = payload(size)

        def parse(body: bytes = body) -> object:
            return Enqueue.model_validate_json(body)

        validate[size] = _median_us(parse, n)
        batch = Enqueue.model_validate_json(body)

        def enqueue(batch: Enqueue = batch) -> None:
            route_transaction(db, QUEUE, batch)

        for _ in range(warm):
            enqueue()
        transaction[size] = _median_us(enqueue, n)
    return Parts(
        app=timed["keys"],
        app_no_auth=timed["none"],
        floor_app=floor_us,
        sha256=_median_us(lambda: hashlib.sha256(secret.encode()).hexdigest(), n),
        authenticate=_median_us(lambda: keys.authenticate(secret), n),
        validate=validate,
        transaction=transaction,
    )
