"""Where an HTTP enqueue's time goes, for ``bench.server``: the parts a request to
``POST /api/queues/{name}/messages`` passes through, each timed alone in this process on
the bench's database, one caller, median of many calls (wall time, fsync included).

- the whole app called as ASGI (no socket, no uvicorn, no HTTP parsing), with keys and
  without (``create_app(db, auth=False)``), with FastAPI's thread pool bypassed (the sync
  key dependency and route run on the event loop's thread: a diagnostic, not a fix, since
  it blocks the loop), and the bare Starlette floor the same way;
- the key lookup (``Keys.authenticate``: SHA-256 of the secret and a read by its hash);
- the body's validation (``Enqueue.model_validate_json``);
- the route's transaction (``tx.enqueue`` per message, commit).

Set against the request's latency over HTTP, the rest is uvicorn (h11), loopback and the
client.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import sluice
from bench.server_clients import QUEUE, payload
from bench.server_floor import FLOOR_PATH
from bench.server_floor import app as floor_app

__all__ = ["Parts", "measure_parts"]


@dataclass(frozen=True)
class Parts:
    """Median microseconds of each part, for batches of 1 and of 10 messages."""

    app: dict[int, float]
    app_no_auth: dict[int, float]
    app_inline: dict[int, float]
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


@contextlib.contextmanager
def _inline() -> Iterator[None]:
    """FastAPI's sync routes and dependencies run in the caller's thread: no thread hop."""
    import fastapi.dependencies.utils
    import fastapi.routing

    async def run_inline(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    modules = (fastapi.routing, fastapi.dependencies.utils)
    saved = [m.run_in_threadpool for m in modules]
    for m in modules:
        m.run_in_threadpool = run_inline  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for m, original in zip(modules, saved, strict=True):
            m.run_in_threadpool = original  # type: ignore[attr-defined]


def measure_parts(db: sluice.Database, secret: str, n: int) -> Parts:
    """Each part ``n`` times (after n // 10 untimed) on ``db``'s queue ``bench``."""
    from sluice.server.app import create_app
    from sluice.server.grants import Keys
    from sluice.server.models import Enqueue

    warm = max(n // 10, 1)
    path = f"/api/queues/{QUEUE}/messages"
    keys = Keys(db)

    async def apps() -> tuple[dict[str, dict[int, float]], float]:
        with_keys, without = create_app(db), create_app(db, auth=False)
        timed: dict[str, dict[int, float]] = {"keys": {}, "none": {}, "inline": {}}
        try:
            for size in (1, 10):
                for label, app, key in (("keys", with_keys, secret), ("none", without, ""),
                                        ("inline", with_keys, secret)):  # fmt: skip
                    call = _asgi_call(app, path, payload(size), key)
                    with _inline() if label == "inline" else contextlib.nullcontext():
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
        messages = [m.payload() for m in Enqueue.model_validate_json(body).messages]

        def enqueue(messages: list[Any] = messages) -> None:
            with db.transaction() as tx:
                for m in messages:
                    tx.enqueue(QUEUE, m)

        for _ in range(warm):
            enqueue()
        transaction[size] = _median_us(enqueue, n)
    return Parts(
        app=timed["keys"],
        app_no_auth=timed["none"],
        app_inline=timed["inline"],
        floor_app=floor_us,
        sha256=_median_us(lambda: hashlib.sha256(secret.encode()).hexdigest(), n),
        authenticate=_median_us(lambda: keys.authenticate(secret), n),
        validate=validate,
        transaction=transaction,
    )
