"""The envelopes of an enqueue: its options checked once for a batch, and the content
rules of a queue that has them (a message's type checked, its priority computed by the
queue's priority function and its declared properties evaluated) before it is stored.
Plain bodies to a plain queue take the fast path (``plain_envelopes``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from sluice.backends.base import SLOTS, Envelope, StoredProperty
from sluice.catalog import priority_level
from sluice.engine.content import QueueContent, priority_value
from sluice.errors import ConfigurationError, MessageError, TypeViolation
from sluice.message import (
    XML,
    Body,
    decode_json,
    encode_body,
    encode_json,
    is_json,
    is_xml,
    lone_surrogate,
)

if TYPE_CHECKING:
    from sluice.engine.types import TypeRegistry

__all__ = [
    "EnqueueOptions",
    "check_group",
    "check_priority",
    "check_seconds",
    "check_text",
    "encode_properties",
    "envelopes",
    "plain_bodies",
    "plain_envelopes",
    "property_value",
    "stored_values",
    "typed_envelope",
]


class EnqueueOptions(TypedDict, total=False):
    """The options of an enqueue; see ``Transaction.enqueue_many``."""

    priority: int | None
    properties: dict[str, Any] | None
    delay: float
    ttl: float | None
    content_type: str | None
    correlation_id: str | None
    reply_to: str | None
    type: str | None
    group: str | None


def envelopes(
    types: TypeRegistry,
    content: QueueContent,
    queue: str,
    bodies: Iterable[Body],
    *,
    first: int,
    lane: str | None,
    now: float,
    priority: int | None,
    properties: dict[str, Any] | None,
    delay: float,
    ttl: float | None,
    content_type: str | None,
    correlation_id: str | None,
    reply_to: str | None,
    type: str | None,
    group: str | None,
) -> list[Envelope]:
    """The envelopes of ``Transaction.enqueue_many``'s bodies to ``queue``, numbered from
    ``first``, enqueued at ``now``; its options are checked once for all of them."""
    spec = content.spec
    given = check_priority(priority)
    options = (
        # A leveled queue stores the level, so every claim orders by it (docs/delivery.md).
        given if spec.priority_levels is None else priority_level(given, spec.priority_levels),
        encode_properties(properties),
        check_text("correlation_id", correlation_id),
        check_text("reply_to", reply_to),
        now,
        now if delay == 0 else now + check_seconds("delay", delay, allow_zero=True),
        None if ttl is None else now + check_seconds("ttl", ttl, allow_zero=False),
    )
    prio, props, correlation, reply, enqueued, available, expires = options
    content_type = check_text("content_type", content_type)
    if not isinstance(bodies, list | tuple):
        bodies = list(bodies)
    if not content.plain or type is not None or not plain_bodies(bodies):
        base = Envelope(queue, 0, prio, "", content_type or "", props, correlation, reply,
                        enqueued, available, expires, type, None, group, lane)  # fmt: skip
        return [
            typed_envelope(types, content, base, num=first + n, body=body,
                           priority=priority, properties=properties)
            for n, body in enumerate(bodies)
        ]  # fmt: skip
    return plain_envelopes(
        queue, first, bodies, content_type=content_type, max_size=spec.max_size,
        options=options, group=group, lane=lane,
    )  # fmt: skip


def plain_bodies(bodies: Sequence[Body]) -> bool:
    """No Pydantic instance among the bodies (those need their type's treatment)."""
    return not any(hasattr(b, "model_dump") and not isinstance(b, type) for b in bodies)


def typed_envelope(
    types: TypeRegistry,
    content: QueueContent,
    base: Envelope,
    *,
    num: int,
    body: Body,
    priority: int | None,
    properties: dict[str, Any] | None,
) -> Envelope:
    """The envelope of one message, checked against its type and with computed values.

    ``base`` carries the options shared by the batch; ``priority`` None means
    the producer gave none, so the priority function decides.
    """
    spec = content.spec
    type_name = base.type
    given = type(body)
    if hasattr(body, "model_dump") and not isinstance(body, type):
        type_name = type_name or types.name_of(type(body))
        body = body.model_dump(mode="json")
    if type_name is None and len(spec.types) == 1:
        type_name = spec.types[0]
    if spec.types and type_name not in spec.types:
        accepted = ", ".join(map(repr, spec.types))
        said = f"of type {type_name!r}" if type_name else "without a type"
        raise TypeViolation(
            f"queue {spec.name!r} accepts messages of type {accepted}, not one {said}; "
            "pass type=... (or a bound Pydantic instance); nothing was stored"
        )
    message_type = types.get(type_name) if type_name is not None else None
    if type_name is not None and message_type is None:
        raise TypeViolation(
            f"message type {type_name!r} is not defined; define it with db.create_type first"
        )
    xml_text = (
        isinstance(body, str | bytes) and message_type is not None and message_type.kind == "xml"
    )
    wanted = base.content_type or (XML if xml_text else None)
    stored, content_type = encode_body(body, wanted, spec.max_size)
    decoded = decode_json(stored) if is_json(content_type) else None
    if is_xml(content_type):
        from sluice.expr.xml import parse_xml  # noqa: PLC0415  (lxml is optional)

        parse_xml(stored)  # malformed XML is refused like malformed JSON
    if message_type is not None:
        expected = is_xml(content_type) if message_type.kind == "xml" else is_json(content_type)
        if not expected:
            raise TypeViolation(
                f"type {type_name!r} is {message_type.kind.upper()}, but the body is "
                f"{content_type}; nothing was stored"
            )
        message_type.check(decoded, stored)
        _check_model(types.model(type_name), given, decoded, type_name)
    row = {
        "body": decoded,
        "raw": stored,
        "props": properties or {},
        "priority": base.priority,
        "type": type_name,
        "enqueued_at": base.enqueued_at,
        "available_at": base.available_at,
        "expires_at": base.expires_at,
        "attempts": 0,
        "correlation_id": base.correlation_id,
        "reply_to": base.reply_to,
        "content_type": content_type,
        "properties": {},
    }
    chosen = base.priority  # a leveled queue's: the level already (enqueue_many maps it)
    if priority is None:
        function = content.priority_function(type_name)
        if function is not None:
            chosen = priority_value(function(row))
            if spec.priority_levels is not None:
                chosen = priority_level(chosen, spec.priority_levels)
            # Declared properties see the priority as stored, as selections over it do.
            row["priority"] = chosen
    keys = base.keys
    if content.values:
        values: list[Any] = [None] * len(SLOTS)
        for index, kind, evaluate in content.values:
            value = evaluate(row)
            values[index] = float(value) if kind == "boolean" and value is not None else value
        keys = tuple(values)
    encoded = (
        encode_json(stored_values(content, row, properties or {}))
        if content.stored
        else base.properties
    )
    # By position, in Envelope's field order: half the cost of _replace, once per message.
    return Envelope(
        base.queue,
        num,
        chosen,
        stored,
        content_type,
        encoded,
        base.correlation_id,
        base.reply_to,
        base.enqueued_at,
        base.available_at,
        base.expires_at,
        type_name,
        keys,
        base.group,
        base.lane,
    )


def _check_model(model: type | None, given: type, value: Any, type_name: str | None) -> None:
    """TypeViolation unless the model bound to the type here takes ``value``: what it
    cannot take (an integer of 1e300, which the JSON Schema allows) was stored, and
    then every get() in this process raised its ValidationError."""
    if model is None or given is model:
        return
    try:
        model.model_validate(value)  # type: ignore[attr-defined]
    except ValueError as exc:  # pydantic's ValidationError
        raise TypeViolation(
            f"the message does not conform to type {type_name!r}'s bound model "
            f"{model.__name__}: {exc}; nothing was stored"
        ) from None


def stored_values(
    content: QueueContent, row: dict[str, Any], given: dict[str, Any]
) -> dict[str, Any]:
    """The message's properties with its queue's stored ones computed and checked.

    A computed property the producer set keeps the producer's value, unless it is
    fixed: then setting it is an error. Every stored property's value must have its
    declared type; a NULL one is left out.
    """
    props = dict(given)
    row["props"] = props  # a computed property reads the properties set so far
    queue = content.spec.name
    for prop, evaluate in content.stored:
        if prop.fixed and prop.name in given:
            raise MessageError(
                f"property {prop.name!r} of queue {queue!r} is computed (FIXED); "
                "it cannot be set; nothing was stored"
            )
        if evaluate is not None and prop.name not in given:
            props[prop.name] = evaluate(row)
        value = property_value(prop, props.get(prop.name), queue)
        if value is None:
            props.pop(prop.name, None)
        else:
            props[prop.name] = value
    return props


def property_value(prop: StoredProperty, value: Any, queue: str) -> Any:
    """``value`` as the declared type of ``prop`` has it, or MessageError (None stays)."""
    if value is None:
        return None
    kind = prop.type
    ok = (
        (kind == "text" and isinstance(value, str))
        or (kind == "boolean" and isinstance(value, bool))
        or (
            kind in ("real", "timestamp", "integer")
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
        )
    )
    if ok and kind == "integer":
        ok = float(value).is_integer() and abs(value) < 2**63
        value = int(value) if ok else value
    if not ok:
        raise MessageError(
            f"property {prop.name!r} of queue {queue!r} is {kind}, not {value!r}; "
            "nothing was stored"
        )
    return value


def plain_envelopes(
    queue: str,
    first: int,
    bodies: Iterable[Body],
    *,
    content_type: str | None,
    max_size: int,
    options: tuple[Any, ...],
    group: str | None,
    lane: str | None,
) -> list[Envelope]:
    """Envelopes of a queue without content rules: the fast path."""
    prio, props, correlation, reply, enqueued, available, expires = options
    return [
        Envelope(
            queue,
            first + n,
            prio,
            *encode_body(body, content_type, max_size),
            props,
            correlation,
            reply,
            enqueued,
            available,
            expires,
            None,
            None,
            group,
            lane,
        )
        for n, body in enumerate(bodies)
    ]


def check_priority(priority: int | None) -> int:
    if priority is None:
        return 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise MessageError(f"priority must be an integer, not {priority!r}")
    if not -(2**63) <= priority < 2**63:
        raise MessageError(f"priority {priority} is out of the 64-bit range")
    return priority


def encode_properties(properties: dict[str, Any] | None) -> str | None:
    if not properties:
        return None
    if not isinstance(properties, dict) or not all(isinstance(k, str) for k in properties):
        raise MessageError("properties must be a dict with str keys")
    try:
        text = encode_json(properties)
    except (TypeError, ValueError) as exc:
        raise MessageError(f"properties must hold JSON values only ({exc})") from exc
    # A lone surrogate passes json's encoder and then fails in the driver as a
    # UnicodeEncodeError, no SluiceError: refused here, as a body's is.
    _check_unicode("properties", text)
    return text


_MAX_GROUP = 1000


def check_group(group: str | None) -> str | None:
    if group is None:
        return None
    if not isinstance(group, str) or not group or len(group) > _MAX_GROUP:
        raise MessageError(
            f"group must be a non-empty str of at most {_MAX_GROUP} characters, not {group!r}"
        )
    # NUL and lone surrogates as in check_text: a group with NUL was stored by SQLite
    # and then never delivered (its lane never matched), and refused by PostgreSQL.
    return check_text("group", group)


def check_text(name: str, value: str | None) -> str | None:
    if value is not None and not isinstance(value, str):
        raise MessageError(f"{name} must be a str or None, not {type(value).__name__}")
    if value is not None and "\x00" in value:
        # PostgreSQL text cannot hold NUL: refused everywhere, so every backend agrees.
        raise MessageError(f"{name} must not contain NUL characters")
    if value is not None:
        _check_unicode(name, value)
    return value


def _check_unicode(name: str, value: str) -> None:
    """MessageError for a lone surrogate, which no database's driver can encode."""
    if (at := lone_surrogate(value)) is not None:
        raise MessageError(f"{name} is not valid Unicode (a lone surrogate at {at})")


def check_seconds(name: str, value: float, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(f"{name} must be a finite number of seconds, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigurationError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, not {value}")
    return float(value)
