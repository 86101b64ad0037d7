"""Routes for what content-aware queuing knows (docs/content.md): message types and
declared properties.

Message types belong to no one queue: any key reads them, an admin key defines them.
A declared property is computed on the queues it names, so declaring it needs
``manage`` on each; a queue's properties are read with any grant on it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field

import sluice
from sluice.server.auth import KeyedRoute, caller, need, need_admin
from sluice.server.grants import Principal
from sluice.server.models import Strict

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["content"], route_class=KeyedRoute)

Who = Annotated[Principal, Depends(caller)]

_ACTIONS = ("produce", "consume", "browse", "manage")


class TypeIn(Strict):
    """A message type: ``schema`` (JSON Schema), ``jpmq`` (JPMQ's type language, whose
    MESSAGETYPE names it) or ``xml_schema`` (XML Schema text), exactly one of them."""

    name: str | None = Field(None, min_length=1, max_length=200)
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    jpmq: str | None = Field(None, max_length=100_000)
    xml_schema: str | None = Field(None, max_length=1_000_000)


class PropertyIn(Strict):
    """A property computed at enqueue from ``expression`` (docs/expressions.md), stored
    and indexed on ``queues``."""

    name: str = Field(min_length=1, max_length=200)
    expression: str = Field(min_length=1, max_length=10_000)
    queues: list[str] = Field(min_length=1, max_length=1000)
    type: Literal["text", "number", "boolean"] | None = None
    indexed: bool = True


class PropertyOut(BaseModel):
    name: str
    expression: str
    type: str


def _db(request: Request) -> sluice.Database:
    db: sluice.Database = request.app.state.db
    return db


@router.get("/types", summary="Every message type's definition (any key)")
def types(request: Request, who: Who) -> dict[str, Any]:
    return _db(request).message_types()


@router.post("/types", status_code=201, summary="Define a message type (admin)")
def create_type(request: Request, who: Who, new: TypeIn, response: Response) -> dict[str, Any]:
    need_admin(who)
    db = _db(request)
    name = db.create_type(new.name, schema=new.json_schema, jpmq=new.jpmq,
                          xml_schema=new.xml_schema)  # fmt: skip
    response.headers["Location"] = f"/api/types/{name}"
    return {"name": name, "definition": db.message_types()[name]}


@router.post("/properties", status_code=201, summary="Declare a property (manage its queues)")
def create_property(request: Request, who: Who, new: PropertyIn) -> PropertyIn:
    for queue in new.queues:
        need(who, queue, "manage")
    _db(request).create_property(new.name, new.expression, queues=new.queues, type=new.type,
                                 indexed=new.indexed)  # fmt: skip
    return new


@router.get("/queues/{name}/properties", summary="A queue's declared properties")
def properties(request: Request, who: Who, name: str) -> list[PropertyOut]:
    if not any(who.allows(name, action) for action in _ACTIONS):
        need(who, name, "browse")
    db = _db(request)
    db.queue(name).spec  # noqa: B018  (404 for a queue that does not exist)
    return [PropertyOut(name=p.name, expression=p.expression, type=p.type)
            for p in db.backend.queue_properties(name)]  # fmt: skip
