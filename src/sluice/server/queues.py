"""Routes for queues: list, create, read (settings and counts), alter, pause, resume, purge,
drop."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response

import sluice
from sluice.server.auth import KeyedRoute, caller, need
from sluice.server.grants import Principal
from sluice.server.models import Purge, Purged, QueueChange, QueueIn, QueueOut

__all__ = ["router"]

router = APIRouter(prefix="/api/queues", tags=["queues"], route_class=KeyedRoute)

Who = Annotated[Principal, Depends(caller)]

_ACTIONS = ("produce", "consume", "browse", "manage")


def database(request: Request) -> sluice.Database:
    db: sluice.Database = request.app.state.db
    return db


def _sees(who: Principal, queue: str) -> bool:
    return any(who.allows(queue, action) for action in _ACTIONS)


@router.get("", summary="The queues this key has any grant on, with their counts")
def list_queues(request: Request, who: Who) -> list[QueueOut]:
    db = database(request)
    return [
        QueueOut.of(spec, db.queue(spec.name).stats())
        for spec in db.queues()
        if _sees(who, spec.name)
    ]


@router.post("", status_code=201, summary="Create a queue (manage)")
def create_queue(request: Request, who: Who, new: QueueIn, response: Response) -> QueueOut:
    need(who, new.name, "manage")
    if new.error_queue is not None:
        need(who, new.error_queue, "manage")  # it may be made too
    db = database(request)
    options: dict[str, Any] = new.model_dump(exclude={"name", "exist_ok"}, exclude_none=True)
    options["types"] = tuple(new.types)
    queue = db.create_queue(new.name, exist_ok=new.exist_ok, **options)
    response.headers["Location"] = f"/api/queues/{new.name}"
    return QueueOut.of(queue.spec, queue.stats())


@router.get("/{name}", summary="A queue's settings and counts by state")
def get_queue(request: Request, who: Who, name: str) -> QueueOut:
    if not _sees(who, name):
        need(who, name, "browse")
    queue = database(request).queue(name)
    return QueueOut.of(queue.spec, queue.stats())


@router.patch("/{name}", summary="Change a queue's settings (manage)")
def alter_queue(request: Request, who: Who, name: str, change: QueueChange) -> QueueOut:
    need(who, name, "manage")
    if change.error_queue is not None:
        # As at create: the error queue may be made too, and rejects go into it, so a
        # key managing one queue must not point it at (or create) a queue it may not.
        need(who, change.error_queue, "manage")
    db = database(request)
    spec = db.alter_queue(name, **change.settings())
    return QueueOut.of(spec, db.queue(name).stats())


@router.post("/{name}/pause", summary="Pause a queue: consumers take nothing (manage)")
def pause_queue(request: Request, who: Who, name: str) -> QueueOut:
    need(who, name, "manage")
    queue = database(request).queue(name)
    queue.pause()
    return QueueOut.of(queue.spec, queue.stats())


@router.post("/{name}/resume", summary="Resume a paused queue, waking its consumers (manage)")
def resume_queue(request: Request, who: Who, name: str) -> QueueOut:
    need(who, name, "manage")
    queue = database(request).queue(name)
    queue.resume()
    return QueueOut.of(queue.spec, queue.stats())


@router.post(
    "/{name}/purge",
    summary="Delete a queue's ready and delayed messages, or kept ones, in one transaction "
    "(manage)",
)
def purge_queue(request: Request, who: Who, name: str, purge: Purge) -> Purged:
    need(who, name, "manage")
    queue = database(request).queue(name)
    return Purged(purged=queue.purge(purge.state, older_than=purge.older_than))


@router.delete("/{name}", status_code=204, summary="Drop a queue and its messages (manage)")
def drop_queue(request: Request, who: Who, name: str) -> Response:
    need(who, name, "manage")
    database(request).drop_queue(name)
    return Response(status_code=204)
