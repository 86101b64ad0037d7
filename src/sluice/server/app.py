"""The ASGI application: ``create_app(db)`` for any backend, mounted by ``sluice serve``
or by the user's own ASGI server (docs/server.md)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import sluice
from sluice.errors import ConfigurationError
from sluice.server import (
    console,
    content,
    events,
    gateways,
    hot,
    idempotency,
    jobs,
    messages,
    metrics,
    profiles,
    queues,
    rules,
    topics,
    transactions,
)
from sluice.server.asyncdb import AsyncDb
from sluice.server.auth import Gate
from sluice.server.grants import Keys
from sluice.server.idempotency import Idempotency
from sluice.server.leases import Leases
from sluice.server.models import with_read_bodies
from sluice.server.offload import THREADS, Offload
from sluice.server.problems import PROBLEM, RESPONSES, Problem, install

__all__ = ["MAX_REQUEST", "create_app", "from_environment"]

MAX_REQUEST = 16 * 1024 * 1024
"""The largest request body by default, bytes (a batch of large messages fits)."""


def create_app(
    db: sluice.Database,
    *,
    auth: bool = True,
    max_request: int = MAX_REQUEST,
    sample_every: float = console.DEFAULT_EVERY,
    sample_duty: float = console.DUTY,
    threads: int = THREADS,
    telemetry: bool = False,
    idempotency_stale: float = idempotency.STALE,
) -> FastAPI:
    """The HTTP API and the web console over ``db``. ``auth``: requests need an API key
    (``sluice keys``); False lets every request do everything (``sluice serve
    --no-auth``, loopback only). ``max_request``: the largest request body in bytes (413
    beyond). ``sample_every``: seconds between the samples of the console's charts;
    ``sample_duty``: the largest share of the time they may take (a slow sample, over
    a backlog of millions, stretches the pause after it; 1.0: never).
    ``threads``: the threads that run the hot routes' transactions (server/offload.py).
    ``idempotency_stale``: seconds after which a request with an Idempotency-Key that
    never answered (its server died) is run again by a retry (server/idempotency.py).
    ``telemetry``: FastAPI's own OpenTelemetry traces, metrics and logs, for an app whose
    process has an OpenTelemetry SDK set up (off: its check costs every request several
    environment lookups, and the server's metrics are Prometheus', at /metrics).
    The app owns no database: closing it gives back what it leased, and ``db`` stays
    open."""
    if max_request < 1:
        raise ConfigurationError(f"max_request must be a positive size, not {max_request!r}")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sampler.start()
        try:
            yield
        finally:  # what clients still hold goes back
            sampler.close()
            await app.state.leases.close()
            app.state.transactions.close()
            await app.state.aio.close()
            app.state.offload.close()

    app = FastAPI(
        title="sluice",
        version=sluice.__version__,
        summary="A persistent, transactional, content-aware message queue over HTTP",
        lifespan=lifespan,
        responses=RESPONSES,
        telemetry={"tracing": telemetry, "metrics": telemetry, "logs": telemetry},
    )
    app.state.db = db
    app.state.gate = Gate(Keys(db) if auth else None)
    app.state.aio = AsyncDb(db)
    app.state.leases = Leases(db.clock)
    app.state.transactions = transactions.Transactions(db.clock)
    app.state.idempotency = Idempotency(db, stale=idempotency_stale)
    app.state.offload = Offload(threads)
    app.state.incoming = gateways.Incoming(db, app.state.offload)
    install(app)
    plain_openapi = app.openapi
    app.openapi = lambda: with_read_bodies(plain_openapi())  # type: ignore[method-assign]
    app.include_router(queues.router)
    app.include_router(content.router)
    app.include_router(messages.router)
    app.include_router(events.router)
    app.include_router(transactions.router)
    app.include_router(topics.router)
    app.include_router(jobs.router)
    app.include_router(profiles.router)
    app.include_router(rules.router)
    app.include_router(gateways.router)
    sampler = console.install(app, db, sample_every=sample_every, sample_duty=sample_duty)
    # Inside the size limit and the metrics:
    hot.install(app, (messages.router, messages.HOT), (gateways.router, gateways.HOT))
    app.add_middleware(_Limit, limit=max_request)
    metrics.install(app)  # outermost: refused bodies (413) are timed too
    return app


def from_environment() -> FastAPI:
    """The app for ``uvicorn --factory sluice.server.app:from_environment``: the database
    is ``SLUICE_DB``'s URL; ``SLUICE_NO_AUTH=1`` serves without keys."""
    url = os.environ.get("SLUICE_DB")
    if not url:
        raise ConfigurationError("SLUICE_DB must name the database: a sluice URL")
    return create_app(sluice.connect(url), auth=os.environ.get("SLUICE_NO_AUTH") != "1")


class _Limit:
    """413 for a request body over ``limit`` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _refuse(send, self.limit)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise Problem(413, _too_large(self.limit), error="PayloadTooLarge")
            return message

        await self.app(scope, counted, send)


def _too_large(limit: int) -> str:
    return f"the request body is over this server's limit of {limit} bytes"


async def _refuse(send: Send, limit: int) -> None:
    body: dict[str, Any] = {"type": "about:blank", "title": "Content too large", "status": 413,
                            "detail": _too_large(limit), "error": "PayloadTooLarge"}  # fmt: skip
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", PROBLEM.encode()),
                            (b"content-length", str(len(data)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": data})
