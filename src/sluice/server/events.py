"""A queue's (or subscription's) messages pushed as server-sent events.

``GET /api/queues/{name}/events`` keeps the response open and sends each message it
takes as an event (``event: message``, ``id:`` the message id, ``data:`` the message
as JSON with its delivery ``token``). Each is leased as a lease request's would be
and settled the same way, by its token (``/api/leases/{token}/ack``, ...). The
stream holds at most ``credit`` unsettled messages: it takes the next only when one
of them is settled or its lease runs out, so a slow client is not flooded. A comment
line every ``KEEPALIVE`` seconds keeps proxies from closing a quiet stream. When the
client goes, what the stream still holds goes back to its place.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
import anyio.lowlevel
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

import sluice
from sluice.aio import AsyncQueue
from sluice.server.asyncdb import AsyncDb
from sluice.server.auth import KeyedRoute, caller, need
from sluice.server.grants import Principal
from sluice.server.leases import MAX_LEASE, Lease, Leases
from sluice.server.models import MessageOut

__all__ = ["KEEPALIVE", "router"]

router = APIRouter(prefix="/api", tags=["messages"], route_class=KeyedRoute)

Who = Annotated[Principal, Depends(caller)]

KEEPALIVE = 15.0
"""Real seconds between keep-alive comments on a quiet stream."""

_POLL = 1.0
"""Real seconds one wait for credit or a message lasts before the stream looks again."""


@router.get(
    "/queues/{name}/events",
    summary="Messages pushed as server-sent events, each leased (consume)",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}},
)
def events(
    request: Request,
    who: Who,
    name: str,
    *,
    lease: Annotated[float, Query(gt=0, le=MAX_LEASE)] = 30.0,
    credit: Annotated[int, Query(ge=1, le=1000)] = 10,
    where: Annotated[str | None, Query(max_length=10_000)] = None,
) -> StreamingResponse:
    need(who, name, "consume")
    db: sluice.Database = request.app.state.db
    db.queue(name).browse(1, where=where)  # the queue and the selection checked first
    aio: AsyncDb = request.app.state.aio
    leases: Leases = request.app.state.leases
    stream = secrets.token_urlsafe(12)

    async def next_one(queue: AsyncQueue) -> Lease | None:
        """Wait for credit, then for a message (on the loop: sluice.aio), and lease it."""
        if not await run_in_threadpool(leases.wait_for_credit, stream, credit, _POLL):
            return None
        m = await queue.get(wait=_POLL, where=where)
        return None if m is None else leases.add(m, lease, stream=stream)

    async def pushed() -> AsyncIterator[str]:
        quiet_since = time.monotonic()
        try:
            queue = await (await aio.get()).queue(name)
            yield ": sluice event stream\n\n"
            while True:
                # Shielded: a client that goes cancels this generator, and a take cut
                # off halfway would leave its message held by nobody. A take waits at
                # most _POLL, so the stream still ends within a second of the client.
                with anyio.CancelScope(shield=True):
                    held = await next_one(queue)
                await anyio.lowlevel.checkpoint()  # where a client's going ends the stream
                if held is None:
                    if time.monotonic() - quiet_since >= KEEPALIVE:
                        quiet_since = time.monotonic()
                        yield ": keep-alive\n\n"
                    continue
                m = held.message.message
                data = MessageOut.of(m, held.token, held.expires).model_dump_json()
                quiet_since = time.monotonic()
                yield f"event: message\nid: {m.id}\ndata: {data}\n\n"
        finally:  # the client went (or the server stops): give back what it held
            with anyio.CancelScope(shield=True):
                await leases.end_stream(stream)

    return StreamingResponse(
        pushed(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
