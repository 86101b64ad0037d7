"""How a file's name and contents become a message, and a message a file: what each
DropboxMQ field is in sluice, so that a name read in and written out again says the
same.

- The id field (DropboxMQ's message id) is kept as the property ``dropbox_id``
  (sluice makes its own message ids) and written back as the id of the files the
  message goes out as; a message without one gets an id made from itself.
- A priority past DropboxMQ's 32 bits goes out as the nearest 32-bit one (so
  DropboxMQ orders it as near as it can) with the exact one in the property
  ``dropbox_priority`` (``L``), which sluice reads back as the priority.
- The type field names a sluice message type when one of that name is defined and
  the body is of its kind (JSON, or XML text); any other type field (DropboxMQ's is
  a free label) is kept as the property ``dropbox_type`` and written back as the
  type field.
- A name that does not parse as DropboxMQ's (``report.csv``) has no metadata: its
  body is JSON if the name ends in ``.json``, text otherwise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from sluice.dropbox.names import INT32, MessageName, is_dropboxmq_id
from sluice.errors import MessageError
from sluice.message import JSON, OCTETS, TEXT, Message, decode_json, encode_json, is_json

__all__ = [
    "ID_PROPERTY",
    "PRIORITY_PROPERTY",
    "TYPE_PROPERTY",
    "body_of",
    "contents_of",
    "kind_of_file",
    "name_of",
    "options_of",
]

ID_PROPERTY = "dropbox_id"
PRIORITY_PROPERTY = "dropbox_priority"
TYPE_PROPERTY = "dropbox_type"

TypeKind = Callable[[str], str | None]
"""The kind (``json``, ``xml``) of the sluice message type of a name; None: none."""


def kind_of_file(meta: MessageName, original: str) -> str:
    """The class letter a file is read by: its name's, or ``M`` for a ``*.json`` file
    whose name carries no metadata."""
    if not meta.parsed and original.lower().endswith(".json"):
        return "M"
    return meta.kind


def body_of(kind: str, data: bytes) -> tuple[Any, str]:
    """A file's body and content type, as its class letter says it is."""
    if kind == "B":
        return data, OCTETS
    if kind == "M":
        try:
            return decode_json(data.decode("utf-8")), JSON
        except (UnicodeDecodeError, ValueError) as exc:
            raise MessageError(f"its class M says JSON, but it is not: {exc}") from None
    if kind in ("O", "S"):
        what = "a Java object" if kind == "O" else "a JMS stream"
        raise MessageError(
            f"its class {kind} ({what}) cannot be stored in sluice; send it as B (bytes)"
        )
    try:
        return data.decode("utf-8"), TEXT
    except UnicodeDecodeError as exc:
        raise MessageError(f"its class T says UTF-8 text, but it is not: {exc}") from None


def options_of(
    meta: MessageName, content_type: str, now: float, type_kind: TypeKind
) -> dict[str, Any]:
    """The enqueue options of a file's message (MessageError for a value no backend
    stores)."""
    properties = dict(meta.properties)
    priority = meta.priority
    exact = properties.pop(PRIORITY_PROPERTY, None)
    if isinstance(exact, int) and not isinstance(exact, bool):
        priority = exact
    if meta.parsed:
        properties[ID_PROPERTY] = meta.id
    options: dict[str, Any] = {"content_type": content_type, "priority": priority}
    if meta.type:
        kind = type_kind(meta.type)
        if kind == "json" and is_json(content_type):
            options["type"] = meta.type
        elif kind == "xml" and content_type == TEXT:
            options["type"] = meta.type
            del options["content_type"]  # the type makes text XML
        else:
            properties[TYPE_PROPERTY] = meta.type
    _check_properties(properties)
    if properties:
        options["properties"] = properties
    if meta.expiration is not None:
        options["ttl"] = meta.expiration / 1000 - now
    if meta.correlation:
        options["correlation_id"] = meta.correlation
    if meta.reply_destination:
        options["reply_to"] = meta.reply_destination
    return options


def _check_properties(properties: dict[str, Any]) -> None:
    # PostgreSQL's jsonb cannot hold NUL (%00 in a name), and failed the whole batch's
    # commit: refused here, file by file, and on every backend alike.
    for name, value in properties.items():
        if _holds_nul(name) or _holds_nul(value):
            raise MessageError(
                f"the property {name!r} holds a NUL character, which sluice does not store "
                "(PostgreSQL cannot); leave %00 out of the name"
            )


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\0" in value
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    return False


def name_of(message: Message) -> MessageName:
    """The metadata of a message's file: the same every time it is written."""
    properties = dict(message.properties)
    given_id = properties.pop(ID_PROPERTY, None)
    label = properties.pop(TYPE_PROPERTY, None)
    properties.pop(PRIORITY_PROPERTY, None)
    priority = message.priority
    if not INT32[0] <= priority <= INT32[1]:
        properties[PRIORITY_PROPERTY] = priority
        priority = min(max(priority, INT32[0]), INT32[1])
    if isinstance(given_id, str) and is_dropboxmq_id(given_id):
        message_id = given_id
    else:
        digest = int.from_bytes(hashlib.sha256(message.id.encode()).digest()[:8], "big")
        millis = int(message.enqueued * 1000)
        message_id = f"{millis}{message.position.seq % 1000:03d}-{digest % 10**10:010d}"
    return MessageName(
        priority=priority,
        id=message_id,
        kind=_kind(message),
        expiration=None if message.expires is None else int(message.expires * 1000),
        correlation=message.correlation_id,
        reply_to=None if message.reply_to is None else "Q" + message.reply_to,
        type=message.type or (label if isinstance(label, str) else None),
        properties=properties,
    )


def _kind(message: Message) -> str:
    if isinstance(message.body, bytes):
        return "B"
    return "M" if is_json(message.content_type) else "T"


def contents_of(message: Message) -> bytes:
    """A message's file contents."""
    body = message.body
    if isinstance(body, bytes):
        return body
    if is_json(message.content_type):
        return encode_json(body).encode("utf-8")
    return str(body).encode("utf-8")
