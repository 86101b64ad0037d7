"""Who asks: the API key of a request (``Authorization: Bearer <key>``) and what its
grants allow. No key, or one that is unknown or revoked: 401; a key without the
grant a route needs: 403. Every route asks, the console's and the metrics' too, and
asks first: a route's key is checked before FastAPI reads its body or parameters
(``KeyedRoute``), so a request without a key is told 401, never that its body is not
JSON."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from sluice.server.grants import Keys, Principal
from sluice.server.problems import Problem, check_query, query_names

__all__ = [
    "ANONYMOUS",
    "UNKNOWN_KEY",
    "Gate",
    "KeyedRoute",
    "authenticated",
    "caller",
    "need",
    "need_admin",
]

ANONYMOUS = Principal("anonymous", True, ())
"""Who every request is with ``--no-auth`` (loopback only): allowed everything."""

UNKNOWN_KEY = (
    "the API key is unknown or revoked; keys belong to one database: a key made with "
    "`sluice keys add` for another database is unknown to this server"
)
"""What a request with a key that is not this database's is told (no key is named)."""

_PRINCIPAL = "sluice.principal"
"""Where a request's scope keeps whom its key stands for, once checked."""


@dataclass(frozen=True, slots=True)
class Gate:
    """How a server authenticates: by ``keys``, or (None) not at all."""

    keys: Keys | None

    async def principal(self, request: Request) -> Principal:
        # A coroutine, so that FastAPI runs it on the event loop: a key remembered from
        # a recent request costs no hop to the thread pool and no read of the store.
        if self.keys is None:
            return ANONYMOUS
        header = request.headers.get("authorization", "")
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise Problem(401, "an API key is needed: Authorization: Bearer <key>",
                          error="Unauthorized")  # fmt: skip
        secret = secret.strip()
        found = self.keys.remembered(secret)
        if found is None:
            found = await run_in_threadpool(self.keys.authenticate, secret)
        if found is None:
            raise Problem(401, UNKNOWN_KEY, error="Unauthorized")
        return found


def authenticated(request: Request, who: Principal) -> None:
    """Keep ``who`` as the request's principal: its route's dependencies read it."""
    request.scope.setdefault("state", {})[_PRINCIPAL] = who


async def caller(request: Request) -> Principal:
    """The request's principal (a FastAPI dependency of every route): checked already
    by its ``KeyedRoute``, or now (the hot routes, answered without FastAPI's routing)."""
    found = request.scope.get("state", {}).get(_PRINCIPAL)
    if isinstance(found, Principal):
        return found
    gate: Gate = request.app.state.gate
    who = await gate.principal(request)
    authenticated(request, who)
    return who


class KeyedRoute(APIRoute):
    """An API route whose key is checked before anything of its request is read.

    FastAPI parses a route's JSON body before it solves any dependency, so a key
    checked as a dependency came too late: a request without one whose body was not
    JSON was told 422, and the body of anyone was parsed."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes = query_names(self.dependant)

        async def keyed(request: Request) -> Response:
            await caller(request)
            check_query(request, takes)
            return await handler(request)

        return keyed


def need(who: Principal, queue: str, action: str) -> None:
    """403 unless ``who`` may ``action`` on ``queue``."""
    if not who.allows(queue, action):
        raise Problem(
            403,
            f"the key {who.name!r} has no grant to {action} on queue {queue!r}",
            error="Forbidden",
        )


def need_admin(who: Principal) -> None:
    if not who.admin:
        raise Problem(403, f"the key {who.name!r} is not an admin key", error="Forbidden")
