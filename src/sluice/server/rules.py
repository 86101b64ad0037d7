"""Routes for the rules application (docs/rules.md): apply a definition, read what is
applied. Rules enqueue into any queue they name, so both need an admin key."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field

import sluice
from sluice.rules import codec
from sluice.server.auth import KeyedRoute, caller, need_admin
from sluice.server.grants import Principal
from sluice.server.models import Strict

__all__ = ["router"]

router = APIRouter(prefix="/api/rules", tags=["rules"], route_class=KeyedRoute)

Who = Annotated[Principal, Depends(caller)]


class Definition(Strict):
    text: str = Field(min_length=1, max_length=1_000_000)
    """Statements of the definition language (CREATE QUEUE, PROPERTY, SLICING, RULE, DROP)."""


def _db(request: Request) -> sluice.Database:
    db: sluice.Database = request.app.state.db
    return db


@router.get("", summary="The applied rules application (admin)")
def application(request: Request, who: Who) -> dict[str, Any]:
    need_admin(who)
    found: dict[str, Any] = json.loads(codec.encode(_db(request).rules.application))
    return found


@router.post("", summary="Apply a definition on top of what is applied (admin)")
def apply(request: Request, who: Who, definition: Definition) -> dict[str, Any]:
    need_admin(who)
    db = _db(request)
    db.apply(definition.text)
    found: dict[str, Any] = json.loads(codec.encode(db.rules.application))
    return found
