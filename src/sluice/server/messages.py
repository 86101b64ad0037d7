"""Routes for messages: enqueue (one transaction per request), lease (take with a
delivery token), settle by token (ack, release, reject, extend) and browse."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request, Response

import sluice
from sluice.aio import AsyncDatabase, AsyncMessage
from sluice.backends.records import Effect
from sluice.server.asyncdb import AsyncDb
from sluice.server.auth import KeyedRoute, caller, need
from sluice.server.grants import Principal
from sluice.server.hot import HotRoute
from sluice.server.idempotency import Answered, Idempotency, Replay, fingerprint
from sluice.server.leases import Leases
from sluice.server.metrics import count
from sluice.server.models import (
    Enqueue,
    Enqueued,
    Extend,
    Leased,
    LeaseRequest,
    MessageOut,
    Reject,
    body_of,
    enqueue_into,
    read_body,
    runs,
)
from sluice.server.offload import Offload
from sluice.server.tracing import traced

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["messages"], route_class=KeyedRoute)

Who = Annotated[Principal, Depends(caller)]


def _db(request: Request) -> sluice.Database:
    db: sluice.Database = request.app.state.db
    return db


async def _aio(request: Request) -> AsyncDatabase:
    aio: AsyncDb = request.app.state.aio
    return await aio.get()


def _offload(request: Request) -> Offload:
    offload: Offload = request.app.state.offload
    return offload


def _leases(request: Request) -> Leases:
    leases: Leases = request.app.state.leases
    return leases


@router.post(
    "/queues/{name}/messages",
    status_code=201,
    response_model=Enqueued,
    summary="Enqueue messages (produce): all of them in one transaction, or none",
    openapi_extra=body_of(Enqueue),
)
async def enqueue(
    request: Request,
    name: str,
    idempotency_key: Annotated[
        str | None,
        Header(description="Makes a retry safe: same key and request, same answer"),
    ] = None,
) -> Response:
    # The hottest route, so it is lean: a coroutine that reads its own body and key
    # (no dependency or body for FastAPI to solve, no answer to validate again), with
    # one hop to the thread pool for the transaction.
    who = await caller(request)
    need(who, name, "produce")
    batch = await read_body(request, Enqueue)
    done: Enqueued | Response
    db = _db(request)
    if idempotency_key is None:
        done = await _offload(request)(traced(db, request.headers, _enqueue), db, name, batch)
    else:
        once = traced(db, request.headers, _enqueue_once)
        done = await _offload(request)(once, request, who, name, batch, idempotency_key)
        if isinstance(done, Response):
            return done
    count(request, name, "enqueued", len(done.ids))
    return Response(done.model_dump_json(), status_code=201, media_type="application/json")


async def _enqueue_hot(request: Request, name: str) -> Response:
    return await enqueue(request, name, request.headers.get("idempotency-key"))


def _enqueue_once(
    request: Request, who: Principal, name: str, batch: Enqueue, idempotency_key: str
) -> Enqueued | Response:
    """``batch`` enqueued once for ``idempotency_key``: a retry is answered as the first."""
    db = _db(request)
    keys: Idempotency = request.app.state.idempotency
    asked = fingerprint("POST", request.url.path, batch.model_dump(mode="json"))

    def work(answered: Answered) -> Enqueued:
        return _enqueue(db, name, batch, lambda done: answered([done.model_dump(mode="json")]))

    done = keys.once(who.name, [(idempotency_key, asked)], work)
    if isinstance(done, Replay):
        return done.response()
    if done is None:  # one key gets an answer (the type says so), never None
        raise AssertionError("one enqueue's once answered None")
    return done


def _enqueue(
    db: sluice.Database,
    name: str,
    batch: Enqueue,
    answered: Callable[[Enqueued], Effect] | None = None,
) -> Enqueued:
    """The batch in one transaction; ``answered``: an effect that commits with it."""
    if answered is None and len(found := runs(batch)) == 1:
        # The common batch (one set of options) as put_many: no explicit transaction
        # to open, hold and close around it, the same single commit.
        options, bodies = found[0]
        return Enqueued(ids=db.queue(name).put_many(bodies, **options))
    with db.transaction() as tx:
        done = Enqueued(ids=enqueue_into(tx, name, batch))
        if answered is not None:
            tx.add_effect(answered(done))
    return done


@router.post(
    "/queues/{name}/leases",
    summary="Take messages (consume), each held under a delivery token until settled",
)
async def lease(request: Request, who: Who, name: str, ask: LeaseRequest) -> Leased:
    need(who, name, "consume")
    queue = await (await _aio(request)).queue(name)
    leases = _leases(request)
    order_by = tuple(ask.order_by) if ask.order_by else None
    taken: list[MessageOut] = []
    wait = ask.wait
    while len(taken) < ask.limit:
        # One transaction per message, as Queue.get takes it: each settles alone. The
        # wait is the event loop's (sluice.aio): no thread is held while it waits.
        m = await queue.get(wait=wait, where=ask.where, order_by=order_by)
        if m is None:
            break
        held = leases.add(m, ask.lease)
        taken.append(MessageOut.of(m.message, held.token, held.expires))
        wait = 0.0  # the long poll is for the first message only
    return Leased(messages=taken)


def _settled(request: Request, who: Principal, token: str) -> AsyncMessage:
    """The leased message of ``token``, its lease ended, if ``who`` consumes its queue."""
    leases = _leases(request)
    need(who, leases.peek(token).message.queue, "consume")
    return leases.take(token).message


@router.post("/leases/{token}/ack", status_code=204, summary="Acknowledge: the message is done")
async def ack(request: Request, who: Who, token: str) -> None:
    m = _settled(request, who, token)
    await m.ack()
    count(request, m.queue, "acked")


async def _ack_hot(request: Request, token: str) -> None:
    await ack(request, await caller(request), token)


HOT = (
    HotRoute("POST", "/api/queues/{name}/messages", _enqueue_hot),
    HotRoute("POST", "/api/leases/{token}/ack", _ack_hot),
)
"""The routes every producer and consumer calls per message, answered without FastAPI's
routing (server/hot.py): the same endpoints, documented by their routes here."""


@router.post(
    "/leases/{token}/release", status_code=204, summary="Give the message back to its place"
)
async def release(request: Request, who: Who, token: str) -> None:
    m = _settled(request, who, token)
    await m.release()
    count(request, m.queue, "released")


@router.post(
    "/leases/{token}/reject",
    status_code=204,
    summary="Send the message to its queue's error queue, with a reason",
)
async def reject(request: Request, who: Who, token: str, why: Reject) -> None:
    m = _settled(request, who, token)
    await m.reject(why.reason)
    count(request, m.queue, "rejected")


@router.post("/leases/{token}/extend", summary="Hold the message longer")
def extend(request: Request, who: Who, token: str, more: Extend) -> MessageOut:
    leases = _leases(request)
    need(who, leases.peek(token).message.queue, "consume")
    held = leases.extend(token, more.seconds)
    return MessageOut.of(held.message.message, held.token, held.expires)


@router.get("/queues/{name}/messages", summary="Browse messages without taking them (browse)")
def browse(
    request: Request,
    who: Who,
    name: str,
    *,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    where: Annotated[str | None, Query(max_length=10_000)] = None,
    after: Annotated[str | None, Query(max_length=100, pattern=r"^-?\d+:\d+$")] = None,
) -> list[MessageOut]:
    need(who, name, "browse")
    found = _db(request).queue(name).browse(limit, where=where, after=after)
    return [MessageOut.of(m) for m in found]
