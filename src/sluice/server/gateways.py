"""Incoming ``http`` gateways (sluice.gateways.http): ``POST /api/gateways/{queue}``
enqueues the request's body, as posted, into an incoming http gateway queue, under the
server's keys and grants (produce). With ``Idempotency-Key`` a retried post is stored
once (another sluice's outgoing http gateway sends its message's id as the key: node to
node forwarding, exactly once). ``Sluice-Properties`` (a JSON object),
``Sluice-Priority``, ``Sluice-Correlation-Id``, ``Sluice-Reply-To``, ``Sluice-Group``
and ``Sluice-Type`` set the message's options."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse

import sluice
from sluice.backends.records import Effect
from sluice.errors import SluiceError
from sluice.message import decode_json, is_json, is_xml
from sluice.server.auth import caller, need
from sluice.server.idempotency import Idempotency, fingerprint
from sluice.server.offload import Offload
from sluice.server.problems import PROBLEM, Problem, problem_body, status_of

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["gateways"])

_OCTETS = "application/octet-stream"


@router.post(
    "/gateways/{name}",
    status_code=201,
    summary="Post one message, its body as sent, into an incoming http gateway (produce)",
    openapi_extra={"requestBody": {"required": True, "content": {"*/*": {"schema": {}}}}},
)
async def post(
    request: Request,
    name: str,
    idempotency_key: Annotated[
        str | None, Header(description="Makes a retry safe: same key and body, same answer")
    ] = None,
) -> Response:
    who = await caller(request)
    need(who, name, "produce")
    db: sluice.Database = request.app.state.db
    offload: Offload = request.app.state.offload
    gateway = await offload(db.gateways.get, name)
    if gateway is None or (gateway.direction, gateway.transport) != ("in", "http"):
        raise Problem(404, f"queue {name!r} is not an incoming http gateway",
                      error="GatewayNotFound")  # fmt: skip
    kind = request.headers.get("content-type", _OCTETS)
    raw = await request.body()
    body = _body(raw, kind)
    posted = _Post(name, body, kind, _options(request))
    if idempotency_key is None:
        message_id = await offload(posted.put, db)
        return JSONResponse({"id": message_id}, status_code=201)
    keys: Idempotency = request.app.state.idempotency
    asked = fingerprint("POST", request.url.path, {"body": raw.hex(), "kind": kind,
                                                   "options": posted.options})  # fmt: skip
    once = functools.partial(posted.once, db, keys, owner=who.name, key=idempotency_key,
                             asked=asked)  # fmt: skip
    return await offload(once)


def _body(raw: bytes, kind: str) -> Any:
    if is_json(kind):
        try:
            return decode_json(raw)
        except ValueError:
            raise Problem(422, "the body is not the JSON its content type says",
                          error="InvalidBody") from None  # fmt: skip
    if kind.startswith("text/") or is_xml(kind):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Problem(422, f"the body is not UTF-8 {kind}", error="InvalidBody") from None
    return raw


def _options(request: Request) -> dict[str, Any]:
    headers = request.headers
    options: dict[str, Any] = {}
    props = headers.get("sluice-properties")
    if props is not None:
        try:
            options["properties"] = json.loads(props)
        except ValueError:
            options["properties"] = None
        if not isinstance(options["properties"], dict):
            raise Problem(422, "Sluice-Properties is a JSON object", error="InvalidRequest")
    priority = headers.get("sluice-priority")
    if priority is not None:
        if not priority.lstrip("-").isdigit() or len(priority) > 10:
            raise Problem(422, "Sluice-Priority is an integer", error="InvalidRequest")
        options["priority"] = int(priority)
    for header, option in (("sluice-correlation-id", "correlation_id"),
                           ("sluice-reply-to", "reply_to"), ("sluice-group", "group"),
                           ("sluice-type", "type")):  # fmt: skip
        value = headers.get(header)
        if value is not None:
            options[option] = value
    return options


@dataclass(frozen=True, slots=True)
class _Post:
    """One posted message: its queue, body, content type and options."""

    queue: str
    body: Any
    kind: str
    options: dict[str, Any]

    def put(self, db: sluice.Database, effect: Callable[[str], Effect] | None = None) -> str:
        """Enqueue it; ``effect`` (of its id) commits with it."""
        with db.transaction() as tx:
            message_id = tx.enqueue(self.queue, self.body, content_type=self.kind,
                                    **self.options)  # fmt: skip
            if effect is not None:
                tx.add_effect(effect(message_id))
        return message_id

    def once(self, db: sluice.Database, keys: Idempotency, *, owner: str, key: str,
             asked: str) -> Response:  # fmt: skip
        """Enqueue it once for ``key``: a retry gets the first answer."""
        replay = keys.begin(owner, key, asked)
        if replay is not None:
            media = PROBLEM if replay.status >= 400 else "application/json"
            return JSONResponse(replay.answer, status_code=replay.status, media_type=media,
                                headers={"Idempotent-Replayed": "true"})  # fmt: skip
        try:
            message_id = self.put(db, lambda i: keys.answered(owner, key, 201, {"id": i}))
        except SluiceError as exc:
            status = status_of(exc)
            keys.failed(owner, key, status,
                        problem_body(status, str(exc), error=type(exc).__name__))  # fmt: skip
            raise
        except BaseException:
            keys.failed(owner, key, 500, None)
            raise
        return JSONResponse({"id": message_id}, status_code=201)
