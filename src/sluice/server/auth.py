"""Who asks: the API key of a request (``Authorization: Bearer <key>``) and what its
grants allow. No key, or one that is unknown or revoked: 401; a key without the
grant a route needs: 403. Every route asks, the console's and the metrics' too."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from sluice.server.grants import Keys, Principal
from sluice.server.problems import Problem

__all__ = ["ANONYMOUS", "Gate", "caller", "need", "need_admin"]

ANONYMOUS = Principal("anonymous", True, ())
"""Who every request is with ``--no-auth`` (loopback only): allowed everything."""


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
            raise Problem(401, "the API key is unknown or revoked", error="Unauthorized")
        return found


async def caller(request: Request) -> Principal:
    """The request's principal (a FastAPI dependency of every route)."""
    gate: Gate = request.app.state.gate
    return await gate.principal(request)


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
