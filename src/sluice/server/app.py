"""The ASGI application: ``create_app(db)`` for any backend, mounted by ``sluice serve``
or by the user's own ASGI server (docs/server.md)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
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
    sqs,
    startup,
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
from sluice.server.problems import PROBLEM, RESPONSES, install, problem_body
from sluice.server.signing import ENV as SIGNING_ENV
from sluice.server.signing import SigningKey

__all__ = ["BEARER", "BODY_TIMEOUT", "MAX_REQUEST", "create_app", "from_environment"]

MAX_REQUEST = 16 * 1024 * 1024
"""The largest request body by default, bytes (a batch of large messages fits)."""

log = logging.getLogger(__name__)

BODY_TIMEOUT = 60.0
"""Seconds a request's body may take to arrive, from the request's start, by default."""


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
    body_timeout: float = BODY_TIMEOUT,
    signing: SigningKey | None = None,
    moto_tests: bool = False,
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
    ``body_timeout``: seconds a request's body may take to arrive (408 beyond).
    ``signing``: the server's signing key, which recovers keys' secrets for the SQS
    endpoint's Signature Version 4 (docs/sqs.md); without it SQS requests are refused
    (``--no-auth`` excepted). ``moto_tests``: moto's account id and reset route, for
    moto's SQS test suite only (sluice.server.sqs.moto).
    ``telemetry``: FastAPI's own OpenTelemetry traces, metrics and logs, for an app whose
    process has an OpenTelemetry SDK set up (off: its check costs every request several
    environment lookups, and the server's metrics are Prometheus', at /metrics).
    The app owns no database: closing it gives back what it leased, and ``db`` stays
    open."""
    if max_request < 1:
        raise ConfigurationError(f"max_request must be a positive size, not {max_request!r}")
    if not body_timeout > 0:
        raise ConfigurationError(f"body_timeout must be positive seconds, not {body_timeout!r}")

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
    app.state.gate = Gate(Keys(db, signing=signing) if auth else None)
    app.state.aio = AsyncDb(db)
    app.state.leases = Leases(db.clock)
    app.state.transactions = transactions.Transactions(db.clock)
    app.state.idempotency = Idempotency(db, stale=idempotency_stale)
    app.state.offload = Offload(threads)
    app.state.incoming = gateways.Incoming(db, app.state.offload)
    install(app)
    plain_openapi = app.openapi

    def documented() -> dict[str, Any]:
        return _secured(with_read_bodies(plain_openapi()), auth)

    app.openapi = documented  # type: ignore[method-assign]
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
    sqs.install(app, moto=moto_tests)  # SQS's POST / and queue URLs, before FastAPI's routes
    app.add_middleware(_Limit, limit=max_request, timeout=body_timeout)
    metrics.install(app)  # outermost: refused bodies (413) are timed too
    return app


BEARER = "bearer"
"""The OpenAPI security scheme of the API keys: ``Authorization: Bearer <key>``."""


def _secured(document: dict[str, Any], keyed: bool) -> dict[str, Any]:
    """``document`` declaring that every operation needs an API key sent as a Bearer
    token, so that generated clients send it and /docs can authorize (the keys are
    checked by KeyedRoute and the hot routes, which FastAPI's own security schemes do
    not see). Without keys (``--no-auth``), nothing is declared."""
    if not keyed:
        return document
    document.setdefault("components", {})["securitySchemes"] = {
        BEARER: {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key made by `sluice keys add`, sent as "
            "`Authorization: Bearer <key>`.",
        }
    }
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            operation["security"] = [{BEARER: []}]
    return document


def from_environment() -> FastAPI:
    """The app for ``uvicorn --factory sluice.server.app:from_environment``: the database
    is ``SLUICE_URL``'s (as for the CLI; ``SLUICE_DB``, its old name, still works with a
    warning); ``SLUICE_NO_AUTH=1`` serves without keys; ``SLUICE_SIGNING_KEY_FILE`` names
    the signing key of the SQS endpoint."""
    url = startup.database_url(os.environ)
    auth = os.environ.get("SLUICE_NO_AUTH") != "1"
    signing_file = os.environ.get(SIGNING_ENV)
    signing = SigningKey.load(signing_file) if signing_file else None
    db = sluice.connect(url)
    if auth and startup.keyless(db):
        log.warning("%s", startup.no_key_warning(url))
    return create_app(db, auth=auth, signing=signing)


class _Limit:
    """The request's body, read whole before the app sees the request: 413 for one over
    ``limit`` bytes (declared or streamed), 408 for one that has not all arrived
    ``timeout`` seconds after the request began; both answered here, closing the
    connection.

    uvicorn waits for a body as long as its client keeps the connection: a client that
    sent its headers and then trickled its body, or stopped, held its request and its
    connection for ever. And read by the routes, a streamed body over the limit was
    answered 400 by FastAPI's routes, which take any error while reading for bad JSON.
    """

    def __init__(self, app: ASGIApp, limit: int, timeout: float) -> None:
        self.app = app
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _refuse(send, 413, _too_large(self.limit), "PayloadTooLarge")
            return
        if declared in (None, b"0") and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body (RFC 9112, 6.3): nothing to wait for
            return
        chunks: list[bytes] = []
        size, outcome = 0, "late"
        with anyio.move_on_after(self.timeout):
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went before its body came: nobody to answer
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self.limit:
                    outcome = "large"
                    break
                if not message.get("more_body", False):
                    outcome = "whole"
                    break
        if outcome == "large":
            await _refuse(send, 413, _too_large(self.limit), "PayloadTooLarge")
        elif outcome == "late":
            late = f"the request body did not all arrive within {self.timeout:g} seconds"
            await _refuse(send, 408, late, "RequestTimeout")
        else:
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that first gives the body, read already, in one message."""
    first: Message | None = {"type": "http.request", "body": body, "more_body": False}

    async def replayed() -> Message:
        nonlocal first
        if first is None:
            return await receive()  # the client's going (an event stream waits for it)
        message, first = first, None
        return message

    return replayed


def _too_large(limit: int) -> str:
    return f"the request body is over this server's limit of {limit} bytes"


async def _refuse(send: Send, status: int, detail: str, error: str) -> None:
    data = json.dumps(problem_body(status, detail, error=error)).encode()
    # Closed: what is left of the body must not be read as the next request.
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", PROBLEM.encode()),
                            (b"content-length", str(len(data)).encode()),
                            (b"connection", b"close")]})  # fmt: skip
    await send({"type": "http.response.body", "body": data})
