"""Incoming ``http`` gateways (sluice.gateways.http): ``POST /api/gateways/{queue}``
enqueues the request's body, as posted, into an incoming http gateway queue, under the
server's keys and grants (produce). With ``Idempotency-Key`` a retried post is stored
once (another sluice's outgoing http gateway sends its message's id as the key: node to
node forwarding, exactly once). ``Sluice-Properties`` (a JSON object),
``Sluice-Priority``, ``Sluice-Correlation-Id``, ``Sluice-Reply-To``, ``Sluice-Group``
and ``Sluice-Type`` set the message's options.

``POST /api/gateways/{queue}/batch`` takes several such posts in one request (what an
outgoing http gateway with ``batch`` sends to another sluice): ``{"messages": [{"key",
"body" (base64 of the bytes posted), "content_type", "properties", "priority",
"correlation_id", "reply_to", "group", "type"}]}``, each entry exactly what one post with
that Idempotency-Key, body and headers would be (the same key answers the same either
way). The entries are taken in order up to the first that cannot be stored now (its key
busy or used by another request, or its body refused): the ones before it are stored in
one transaction, in order, each once per key. The answer (200) has one result per entry
taken, ``{"status", "answer"}`` as its own post would have answered, the last one the
entry that stopped the batch, if one did; the entries after it were not looked at."""

from __future__ import annotations

import binascii
import functools
import hashlib
import itertools
import json
import time
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

import sluice
from sluice.errors import SluiceError
from sluice.message import decode_json, is_json, is_xml
from sluice.server.auth import KeyedRoute, caller, need
from sluice.server.grants import Principal
from sluice.server.hot import HotRoute
from sluice.server.idempotency import Answered, Idempotency, Replay
from sluice.server.models import body_of, read_body, shallow
from sluice.server.offload import Offload
from sluice.server.problems import Problem, problem_body, status_of
from sluice.server.tracing import traced

__all__ = ["HOT", "Incoming", "router"]

router = APIRouter(prefix="/api", tags=["gateways"], route_class=KeyedRoute)

_OCTETS = "application/octet-stream"
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""Options as fingerprints hash them: one text for equal options."""


class Incoming:
    """Which queues are incoming http gateways, as the posts ask it: a gateway found is
    remembered for ``SEEN`` seconds (a post reads no definition), a queue that is not
    one is looked up again each time (a gateway just defined takes posts at once; one
    dropped still takes them for up to ``SEEN`` seconds, into its queue if that is
    still there)."""

    SEEN = 1.0

    def __init__(self, db: sluice.Database, offload: Offload) -> None:
        self._db = db
        self._offload = offload
        self._seen: dict[str, float] = {}

    async def check(self, name: str) -> None:
        """404 unless ``name`` is an incoming http gateway."""
        now = time.monotonic()
        if self._seen.get(name, 0.0) > now:
            return
        gateway = await self._offload(self._db.gateways.get, name)
        if gateway is None or (gateway.direction, gateway.transport) != ("in", "http"):
            self._seen.pop(name, None)
            raise Problem(404, f"queue {name!r} is not an incoming http gateway",
                          error="GatewayNotFound")  # fmt: skip
        self._seen[name] = now + self.SEEN


async def _incoming(request: Request, name: str) -> tuple[Principal, sluice.Database, Offload]:
    """Who asks, if they may produce into ``name``, an incoming http gateway (else 404)."""
    who = await caller(request)
    need(who, name, "produce")
    incoming: Incoming = request.app.state.incoming
    await incoming.check(name)
    return who, request.app.state.db, request.app.state.offload


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
    who, db, offload = await _incoming(request, name)
    kind = request.headers.get("content-type", _OCTETS)
    raw = await request.body()
    body = _body(raw, kind)
    posted = _Post(name, body, kind, _options(request))
    if idempotency_key is None:
        message_id = await offload(traced(db, request.headers, posted.put), db)
        return JSONResponse({"id": message_id}, status_code=201)
    keys: Idempotency = request.app.state.idempotency
    asked = posted.asked(f"/api/gateways/{name}", raw)  # the path (request.url costs)
    once = functools.partial(keys.once, who.name, [(idempotency_key, asked)],
                             functools.partial(posted.put_many, db, [posted]))  # fmt: skip
    done = await offload(traced(db, request.headers, once))
    if isinstance(done, Replay):
        return done.response()
    if done is None:  # one key gets an answer (the type says so), never None
        raise AssertionError("one post's once answered None")
    return JSONResponse({"id": done[0]}, status_code=201)


async def _post_hot(request: Request, name: str) -> Response:
    return await post(request, name, request.headers.get("idempotency-key"))


class BatchEntry(BaseModel):
    """One post of a batch: its Idempotency-Key, the posted bytes and the headers' options."""

    model_config = ConfigDict(extra="forbid")

    key: str
    body: str = Field(description="the bytes posted, base64")
    content_type: str = _OCTETS
    properties: Annotated[dict[str, Any] | None, AfterValidator(shallow)] = None
    priority: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    correlation_id: str | None = None
    reply_to: str | None = None
    group: str | None = None
    type: str | None = None


class Batch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[BatchEntry] = Field(min_length=1, max_length=1000)


@router.post(
    "/gateways/{name}/batch",
    status_code=200,
    summary="Post several messages, each with its Idempotency-Key, into an incoming http "
    "gateway, in order (produce)",
    openapi_extra=body_of(Batch),
)
async def post_batch(request: Request, name: str) -> Response:
    who, db, offload = await _incoming(request, name)
    batch = await read_body(request, Batch)
    keys: Idempotency = request.app.state.idempotency
    path = f"/api/gateways/{name}"  # a post's own path: the same key, the same answer
    many = functools.partial(_many, db, keys, name, path=path, owner=who.name,
                             entries=batch.messages)  # fmt: skip
    results = await offload(many)
    return JSONResponse({"results": results}, status_code=200)


HOT = (
    HotRoute("POST", "/api/gateways/{name}", _post_hot),
    HotRoute("POST", "/api/gateways/{name}/batch", post_batch),
)
"""What a forwarding sluice posts per message or batch, answered without FastAPI's
routing (server/hot.py)."""


def _entry(queue: str, entry: BatchEntry) -> tuple[_Post, bytes]:
    try:
        raw = binascii.a2b_base64(entry.body, strict_mode=True)
    except (binascii.Error, ValueError):
        raise Problem(422, "a batch entry's body is base64", error="InvalidBody") from None
    options: dict[str, Any] = {}
    for option in ("properties", "priority", "correlation_id", "reply_to", "group", "type"):
        value = getattr(entry, option)
        if value is not None:
            options[option] = value
    return _Post(queue, _body(raw, entry.content_type), entry.content_type, options), raw


def _many(db: sluice.Database, keys: Idempotency, queue: str, *, path: str, owner: str,
          entries: list[BatchEntry]) -> list[dict[str, Any]]:  # fmt: skip
    """The entries in order up to the first that cannot be stored now; the new ones
    stored in one transaction, each with its key's answer. The common batch, every
    entry new and storable, is one transaction with no claims (``Idempotency.once``);
    any other is taken entry by entry (``_claimed``)."""
    try:
        posts = [_entry(queue, entry) for entry in entries]
    except Problem:
        posts = []
    if posts and len({entry.key for entry in entries}) == len(entries):
        keyed: list[tuple[str, str]] = []
        head, before = b"", None
        for entry, (p, raw) in zip(entries, posts, strict=True):
            if p.options_of() != before:  # a run of neighbours shares its head
                head, before = p.head(path), p.options_of()
            keyed.append((entry.key, p.asked(path, raw, head)))
        work = functools.partial(_Post.put_many, db, [p for p, _ in posts])
        done = keys.once(owner, keyed, work)
        if isinstance(done, list):
            return [{"status": 201, "answer": {"id": i}} for i in done]
    return _claimed(db, keys, queue, path=path, owner=owner, entries=entries)


def _claimed(db: sluice.Database, keys: Idempotency, queue: str, *, path: str, owner: str,
             entries: list[BatchEntry]) -> list[dict[str, Any]]:  # fmt: skip
    """``_many`` entry by entry, each key claimed before the work (``Idempotency.begin``)."""
    results: list[dict[str, Any]] = []
    new: list[tuple[int, str, _Post]] = []  # (its result's place, key, post)
    try:
        for entry in entries:
            try:
                posted, raw = _entry(queue, entry)
                asked = posted.asked(path, raw)
                replay = keys.begin(owner, entry.key, asked)
            except Problem as exc:
                results.append({"status": exc.status, "answer": problem_body(
                    exc.status, exc.detail, error=exc.error)})  # fmt: skip
                break
            if replay is not None:
                results.append({"status": replay.status, "answer": replay.answer})
                if replay.status >= 300:
                    break
                continue
            new.append((len(results), entry.key, posted))
            results.append({"status": 201, "answer": None})
        if new:
            with db.transaction() as tx:
                for place, key, posted in new:
                    message_id = tx.enqueue(queue, posted.body, content_type=posted.kind,
                                            **posted.options)  # fmt: skip
                    answer = {"id": message_id}
                    tx.add_effect(keys.answered(owner, key, 201, answer))
                    results[place]["answer"] = answer
    except BaseException as exc:
        status = status_of(exc) if isinstance(exc, SluiceError) else 500
        body = problem_body(status, str(exc), error=type(exc).__name__) if status < 500 else None
        for _, key, _ in new:  # a client's error is each key's answer; a server's frees them
            keys.failed(owner, key, status, body)
        raise
    return results


def _body(raw: bytes, kind: str) -> Any:
    if is_json(kind):
        try:
            # JSON between systems is UTF-8 (RFC 8259): decoded here, the scanner reads
            # it at once; other encodings (a BOM, UTF-16) take json's own detection.
            try:
                value = decode_json(raw.decode("utf-8"))
            except UnicodeDecodeError:
                value = decode_json(raw)
        except ValueError:
            raise Problem(422, "the body is not the JSON its content type says",
                          error="InvalidBody") from None  # fmt: skip
        return _shallow(value, "the body", "InvalidBody")
    if kind.startswith("text/") or is_xml(kind):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Problem(422, f"the body is not UTF-8 {kind}", error="InvalidBody") from None
    return raw


def _shallow(value: Any, what: str, error: str) -> Any:
    # Held to the depth the messages API allows (models.MAX_DEPTH): a deeper body or
    # properties was stored, and every lease of its message was then a 500.
    try:
        return shallow(value)
    except ValueError as exc:
        raise Problem(422, f"{what}: {exc}", error=error) from None


def _options(request: Request) -> dict[str, Any]:
    headers = request.headers
    options: dict[str, Any] = {}
    props = headers.get("sluice-properties")
    if props is not None:
        try:
            options["properties"] = decode_json(props)  # json.loads let a RecursionError out
        except ValueError:
            options["properties"] = None
        if not isinstance(options["properties"], dict):
            raise Problem(422, "Sluice-Properties is a JSON object", error="InvalidRequest")
        _shallow(options["properties"], "Sluice-Properties", "InvalidRequest")
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

    def put(self, db: sluice.Database) -> str:
        """Enqueue it."""
        return db.queue(self.queue).put(self.body, content_type=self.kind, **self.options)

    @staticmethod
    def put_many(db: sluice.Database, posts: list[_Post], answered: Answered) -> list[str]:
        """Enqueue ``posts`` in order in one transaction, their answers (``{"id"}``
        each) stored with it; their ids."""
        ids: list[str] = []
        with db.transaction() as tx:
            # Neighbours with the same options (a forwarded batch's are, mostly) go in
            # one enqueue_many: the options are checked once for all of them.
            for (queue, kind, options), run in itertools.groupby(posts, key=_Post.options_of):
                ids += tx.enqueue_many(queue, [p.body for p in run], content_type=kind,
                                       **options)  # fmt: skip
            tx.add_effect(answered([{"id": i} for i in ids]))
        return ids

    def options_of(self) -> tuple[str, str, dict[str, Any]]:
        return self.queue, self.kind, self.options

    def asked(self, path: str, raw: bytes, head: bytes | None = None) -> str:
        """This post's fingerprint (as idempotency.fingerprint's, cheaper: the body's
        bytes hashed as they came, not as JSON of their hex); ``head``: its ``head``,
        if known (a batch's neighbours share theirs)."""
        return hashlib.sha256((head or self.head(path)) + raw).hexdigest()

    def head(self, path: str) -> bytes:
        """What a fingerprint hashes before the body: the path, content type, options."""
        return f"POST {path}\n{_CANONICAL.encode([self.kind, self.options])}\n".encode()
