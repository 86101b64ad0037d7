"""The JSON shapes of the HTTP API: what requests carry and answers hold (OpenAPI)."""

from __future__ import annotations

import base64
import dataclasses
import itertools
from typing import Annotated, Any, Literal, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from sluice.catalog import Durability, Isolation, QueueSpec
from sluice.engine.transaction import Transaction
from sluice.message import Message, decode_json, is_json
from sluice.server.problems import Problem

_M = TypeVar("_M", bound=BaseModel)

__all__ = [
    "MAX_DEPTH",
    "Enqueue",
    "Enqueued",
    "JsonValue",
    "LeaseRequest",
    "Leased",
    "MessageOut",
    "NewMessage",
    "Purge",
    "Purged",
    "QueueChange",
    "QueueIn",
    "QueueOut",
    "Reject",
    "Strict",
    "enqueue_into",
    "runs",
    "shallow",
]

MAX_BATCH = 1000
"""Messages one enqueue request may carry."""

MAX_TAKE = 100
"""Messages one lease request may take."""

MAX_WAIT = 20.0
"""The longest a lease request waits for a first message (long poll), seconds."""

MAX_DEPTH = 100
"""How deeply a JSON value in a request (a body, properties, a job's info) may nest."""

_NAME = Field(min_length=1, max_length=200)


_FLAT = frozenset({str, int, float, bool, type(None)})


def shallow(value: Any) -> Any:
    """``value`` if it nests at most MAX_DEPTH levels deep. A deeper one would be taken
    and then fail to be shown in every answer that carries it (a 500 on each lease)."""
    # Most bodies are a scalar or an object of scalars: checked without building levels.
    if type(value) in _FLAT or (
        type(value) is dict and all(type(v) in _FLAT for v in value.values())
    ):
        return value
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise ValueError(f"the JSON value nests deeper than {MAX_DEPTH} levels")
        level = [
            inner
            for v in level
            for inner in (v.values() if isinstance(v, dict) else v if isinstance(v, list) else ())
        ]
    return value


JsonValue = Annotated[Any, AfterValidator(shallow)]
"""Any JSON value that nests no deeper than MAX_DEPTH."""


class Strict(BaseModel):
    """A request shape that refuses fields it does not know (a typo is an error) and
    values of another JSON type than its schema says (``"true"`` for a boolean, ``"5"``
    for a number): what the OpenAPI document declares is what is accepted."""

    model_config = ConfigDict(extra="forbid", strict=True)


class QueueIn(Strict):
    """A queue to create (docs/queues.md has every setting)."""

    name: str = _NAME
    durability: Durability = "persistent"
    max_attempts: int | None = Field(None, ge=1)
    error_queue: str | None = Field(None, min_length=1, max_length=200)
    max_size: int | None = Field(None, ge=1)
    types: list[str] = Field(default_factory=list)
    isolation: Isolation = "none"
    priority_levels: int | None = Field(None, ge=1, le=10)
    max_in_flight: int | None = Field(None, ge=1)
    retention: float | None = Field(None, ge=0)
    exist_ok: bool = False


class QueueChange(Strict):
    """Settings to change; those left out stay, and ``null`` puts one back to its
    default (as a queue created without it has it: no limit, no error queue,
    ``persistent``, 1 MiB)."""

    durability: Durability | None = None
    max_attempts: int | None = Field(None, ge=1)
    error_queue: str | None = Field(None, min_length=1, max_length=200)
    max_size: int | None = Field(None, ge=1)
    max_in_flight: int | None = Field(None, ge=1)
    retention: float | None = Field(None, ge=0)

    def settings(self) -> dict[str, Any]:
        """The settings given, for ``alter_queue``: each null as its default (the
        engine takes None for "no limit", but refused it for durability and max_size)."""
        return {
            name: _SPEC_DEFAULTS[name] if value is None else value
            for name, value in self.model_dump(exclude_unset=True).items()
        }


_SPEC_DEFAULTS = {f.name: f.default for f in dataclasses.fields(QueueSpec)}


class Purge(Strict):
    """Which messages a purge deletes (``Queue.purge``): ``ready``, every one not yet
    delivered (ready or delayed; held ones stay), or kept ``expired``, ``failed`` or
    ``done`` ones, those over ``older_than`` seconds old."""

    state: Literal["ready", "expired", "failed", "done"]
    older_than: float = Field(0.0, ge=0)


class Purged(BaseModel):
    """How many messages a purge deleted."""

    purged: int


class QueueOut(BaseModel):
    """A queue's settings and its counts by state."""

    name: str
    kind: str
    durability: str
    max_attempts: int | None
    error_queue: str | None
    max_size: int
    types: list[str]
    isolation: str
    topic: str | None
    priority_levels: int | None
    max_in_flight: int | None
    retention: float | None
    paused: bool
    counts: dict[str, int] | None = None

    @classmethod
    def of(cls, spec: QueueSpec, counts: dict[str, int] | None = None) -> QueueOut:
        return cls(
            name=spec.name,
            kind=spec.kind,
            durability=spec.durability,
            max_attempts=spec.max_attempts,
            error_queue=spec.error_queue,
            max_size=spec.max_size,
            types=list(spec.types),
            isolation=spec.isolation,
            topic=spec.topic,
            priority_levels=spec.priority_levels,
            max_in_flight=spec.max_in_flight,
            retention=spec.retention,
            paused=spec.paused,
            counts=counts,
        )


class NewMessage(Strict):
    """One message to enqueue: ``body`` (a JSON value; a string for a text or XML
    ``content_type``) or ``body_base64`` (bytes), and its options."""

    body: JsonValue = None
    body_base64: str | None = None
    content_type: str | None = Field(None, max_length=200)
    priority: int | None = None
    properties: Annotated[dict[str, Any] | None, AfterValidator(shallow)] = None
    delay: float = Field(0.0, ge=0)
    ttl: float | None = Field(None, gt=0)
    group: str | None = Field(None, min_length=1, max_length=200)
    correlation_id: str | None = Field(None, max_length=200)
    reply_to: str | None = Field(None, max_length=200)
    type: str | None = Field(None, max_length=200)

    def options(self) -> dict[str, Any]:
        """The enqueue options, as ``Transaction.enqueue`` takes them."""
        return {
            "priority": self.priority,
            "properties": self.properties,
            "delay": self.delay,
            "ttl": self.ttl,
            "content_type": self.content_type,
            "correlation_id": self.correlation_id,
            "reply_to": self.reply_to,
            "type": self.type,
            "group": self.group,
        }

    def payload(self) -> Any:
        """The body as sluice enqueues it."""
        if self.body_base64 is None:
            kind = self.content_type
            if kind is not None and not is_json(kind) and not isinstance(self.body, str):
                raise ValueError(
                    f"a body of content type {kind!r} is a string (or bytes as body_base64), "
                    f"not {type(self.body).__name__}"
                )
            return self.body
        if self.body is not None:
            raise ValueError("a message has a body or a body_base64, not both")
        try:
            data = base64.b64decode(self.body_base64, validate=True)
        except ValueError:
            raise ValueError("body_base64 is not base64") from None
        if self.content_type is not None and is_json(self.content_type):
            # Bytes said to be JSON are leased as a JSON body: held to body's depth, or a
            # deeper one was taken and every lease of it was then a 500.
            try:
                value = decode_json(data.decode("utf-8"))
            except ValueError as exc:  # UnicodeDecodeError too
                raise ValueError(
                    f"body_base64 is not the UTF-8 JSON its type says ({exc})"
                ) from None
            shallow(value)
        return data


class Enqueue(Strict):
    """Messages to enqueue, in order, in one transaction: all or none."""

    messages: list[NewMessage] = Field(min_length=1, max_length=MAX_BATCH)


class Enqueued(BaseModel):
    ids: list[str]


READ_BODIES: set[type[BaseModel]] = set()
"""The models of routes that read their bodies themselves (body_of)."""


def with_read_bodies(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` (an OpenAPI one) with the schemas of READ_BODIES among its own."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in READ_BODIES:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas.setdefault(model.__name__, schema)
    return document


def body_of(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a route that reads ``model`` itself (read_body),
    for ``openapi_extra``: the model is among the document's schemas (the app's
    ``openapi`` adds it, see app.py)."""
    READ_BODIES.add(model)
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


async def read_body(request: Request, model: type[_M]) -> _M:
    """The request's JSON body as ``model``; 422 as FastAPI's own bodies get it (a route
    that reads its body itself skips FastAPI's parse to a dict and validation of it)."""
    kind = request.headers.get("content-type", "application/json").partition(";")[0].strip()
    if not is_json(kind):
        raise RequestValidationError(
            [{"loc": ("body",), "msg": f"the body must be JSON, not {kind!r}", "type": "json"}]
        )
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None


def runs(batch: Enqueue) -> list[tuple[dict[str, Any], list[Any]]]:
    """``batch`` as runs of neighbours with the same options: (options, bodies) each, as
    ``enqueue_many`` takes them. A body that is not what its content type says: 422."""
    found: list[tuple[dict[str, Any], list[Any]]] = []
    for options, run in itertools.groupby(batch.messages, key=NewMessage.options):
        try:
            found.append((options, [m.payload() for m in run]))
        except ValueError as exc:
            raise Problem(422, str(exc), error="InvalidBody") from None
    return found


def enqueue_into(tx: Transaction, queue: str, batch: Enqueue) -> list[str]:
    """Enqueue ``batch`` into ``queue`` in ``tx``; their ids. A body that is not what its
    content type says: 422, and ``tx`` left to its owner to abort."""
    ids: list[str] = []
    # Neighbours with the same options go in as one enqueue_many: a batch of plain
    # messages is one call, as ``put_many`` is in process.
    for options, bodies in runs(batch):
        ids.extend(tx.enqueue_many(queue, bodies, **options))
    return ids


class LeaseRequest(Strict):
    """Take up to ``limit`` messages, waiting up to ``wait`` seconds for the first, each
    held for ``lease`` seconds unless settled or extended; ``where`` and ``order_by``
    select and order by content (docs/expressions.md)."""

    limit: int = Field(1, ge=1, le=MAX_TAKE)
    wait: float = Field(0.0, ge=0, le=MAX_WAIT)
    lease: float = Field(30.0, gt=0, le=12 * 3600)
    where: str | None = Field(None, max_length=10_000)
    order_by: list[str] | None = Field(None, max_length=16)


class MessageOut(BaseModel):
    """A message as the API shows it; ``token`` and ``lease_expires`` when leased."""

    id: str
    queue: str
    body: Any = None
    body_base64: str | None = None
    content_type: str
    priority: int
    properties: dict[str, Any]
    attempts: int
    enqueued_at: float
    available_at: float
    expires_at: float | None
    correlation_id: str | None
    reply_to: str | None
    type: str | None
    group: str | None
    position: str
    token: str | None = None
    lease_expires: float | None = None

    @classmethod
    def of(
        cls, m: Message, token: str | None = None, lease_expires: float | None = None
    ) -> MessageOut:
        raw = isinstance(m.body, bytes)
        return cls(
            id=m.id,
            queue=m.queue,
            body=None if raw else m.body,
            body_base64=base64.b64encode(m.body).decode() if raw else None,
            content_type=m.content_type,
            priority=m.priority,
            properties=m.properties,
            attempts=m.attempts,
            enqueued_at=m.enqueued,
            available_at=m.available,
            expires_at=m.expires,
            correlation_id=m.correlation_id,
            reply_to=m.reply_to,
            type=m.type,
            group=m.group,
            position=str(m.position),
            token=token,
            lease_expires=lease_expires,
        )


class Leased(BaseModel):
    messages: list[MessageOut]


class Reject(Strict):
    reason: str = Field(min_length=1, max_length=10_000)


class Extend(Strict):
    seconds: float = Field(gt=0, le=12 * 3600)
