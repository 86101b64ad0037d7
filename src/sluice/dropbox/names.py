"""Message file names in DropboxMQ's format: the message's metadata, dot-separated.

``priority.id.class[.expiration[.correlation[.replyTo[.type[.props]]]]]``, as
DropboxMQ 1.2's ``DefaultMessageTranscoder`` writes and reads them (its source,
where it differs from its documentation):

- ``priority``: any 32-bit integer; ``id``: ``<epoch-ms><3-digit counter>-<digits>``,
  whose first part is the timestamp * 1000 + a sequence; ``class``: ``T`` text,
  ``B`` bytes, ``M`` map (JSON here), ``O`` object, ``S`` stream; a missing or
  unknown letter is text.
- ``expiration``: milliseconds since the epoch, empty or 0 for never.
- ``replyTo``: ``Q<queue>`` or ``T<topic>``.
- ``props``: ``name=value`` pairs joined by ``&``, the name's last letter giving
  the value's type (B boolean, Y byte, H short, I int, L long, F float, D
  double, S string; an unknown letter is a string). sluice adds ``J``, a JSON
  value (a list, an object, null or an integer past 64 bits), which DropboxMQ
  reads as a string (an unknown letter): every property value round-trips.
  sluice writes the pairs in the order of their names.
- Values are URL-encoded (UTF-8, ``+`` for a space) with ``.`` as ``%2E``.
  Trailing empty fields are left out; interior ones stay empty (``..``).
- A name whose priority, id or expiration does not parse is taken whole as the
  message's id, with the defaults for the rest (so a message can always be
  consumed, whatever its name says).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote_plus, unquote_plus

from sluice.errors import MessageError

__all__ = [
    "DEFAULT_PRIORITY",
    "INT32",
    "MAX_NAME",
    "MessageName",
    "encode_property",
    "encode_value",
    "fit_name",
    "is_dropboxmq_id",
    "parse_name",
]

DEFAULT_PRIORITY = 4
"""JMS's default priority, DropboxMQ's for a name that does not parse."""

_ID = re.compile(r"(\d{1,18})-(\d{1,19})")
INT32 = (-(2**31), 2**31 - 1)
"""DropboxMQ's range of priorities (a Java int)."""
MAX_NAME = 255
"""Bytes in a file name: the limit of ext4, XFS, NFS and SMB alike."""
_INT64 = (-(2**63), 2**63 - 1)
_RANGES = {"Y": 8, "H": 16, "I": 32, "L": 64}


@dataclass(frozen=True, slots=True)
class MessageName:
    """A message's metadata as its file name carries it."""

    priority: int = DEFAULT_PRIORITY
    id: str = ""
    kind: str = "T"
    """The class letter: T text, B bytes, M map (JSON), O object, S stream."""
    expiration: int | None = None
    """Milliseconds since the epoch; None: never."""
    correlation: str | None = None
    reply_to: str | None = None
    """``Q<queue>`` or ``T<topic>``, as the name has it."""
    type: str | None = None
    properties: dict[str, Any] = field(default_factory=dict)
    parsed: bool = True
    """False: the name did not parse and is the whole id."""

    @property
    def timestamp(self) -> int:
        """The id's timestamp * 1000 + sequence (0 if the id has none): the order of
        names of one priority."""
        found = _ID.fullmatch(self.id)
        return int(found.group(1)) if found else 0

    @property
    def reply_destination(self) -> str | None:
        """The reply-to destination's name, without its Q/T letter."""
        return self.reply_to[1:] if self.reply_to else None

    def format(self) -> str:
        """The file name; the inverse of ``parse_name`` for names that parse."""
        if not INT32[0] <= self.priority <= INT32[1]:
            raise MessageError(f"priority {self.priority} is past DropboxMQ's 32 bits")
        props = "&".join(encode_property(n, v) for n, v in sorted(self.properties.items()))
        fields = [
            str(self.priority),
            encode_value(self.id),
            self.kind,
            "" if self.expiration is None else str(self.expiration),
            encode_value(self.correlation or ""),
            encode_value(self.reply_to or ""),
            encode_value(self.type or ""),
            props,
        ]
        while len(fields) > 3 and not fields[-1]:
            fields.pop()
        return ".".join(fields)


def fit_name(meta: MessageName) -> tuple[str, list[str]]:
    """``meta``'s file name, and what had to be left out of it to fit in MAX_NAME bytes.

    The rule, the same every time: whole properties are left out, the longest
    (encoded) first and, of equal ones, the last by name; then the type, the reply-to
    and the correlation fields, in that order. Priority, id, class and expiration are
    always kept, and no value is ever cut.
    """
    dropped: list[str] = []
    while len(name := meta.format().encode()) > MAX_NAME:
        if meta.properties:
            # Reversed, so that max (the first of the longest) is the last by name.
            names = sorted(meta.properties, reverse=True)
            longest = max(names, key=lambda n: len(encode_property(n, meta.properties[n])))
            rest = {n: v for n, v in meta.properties.items() if n != longest}
            meta = replace(meta, properties=rest)
            dropped.append(f"property {longest!r}")
        elif meta.type is not None:
            meta = replace(meta, type=None)
            dropped.append("type")
        elif meta.reply_to is not None:
            meta = replace(meta, reply_to=None)
            dropped.append("reply-to")
        elif meta.correlation is not None:
            meta = replace(meta, correlation=None)
            dropped.append("correlation")
        else:  # not with sluice's ids: priority, id, class and expiration fit in 80 bytes
            raise MessageError(f"the name {meta.format()!r} is too long even without metadata")
    return name.decode(), dropped


def encode_property(name: str, value: Any) -> str:
    """One ``name=value`` pair of the properties field."""
    letter, text = _typed(value)
    return f"{encode_value(name + letter)}={encode_value(text)}"


def encode_value(text: str) -> str:
    """URL-encode as Java's URLEncoder does, and ``.`` (the field separator) too."""
    return quote_plus(text, safe="*").replace(".", "%2E").replace("~", "%7E")


def is_dropboxmq_id(text: str) -> bool:
    """Whether ``text`` is an id DropboxMQ reads back from a name's id field."""
    return _ID.fullmatch(text) is not None


def parse_name(name: str) -> MessageName:
    """Read a file name; one that does not parse is the id of a default message.

    Raises MessageError for a property value that its type letter refuses.
    """
    fields = name.split(".")
    if len(fields) < 3:
        return MessageName(id=name, parsed=False)
    try:
        priority = int(fields[0], 10)
        expiration = int(fields[3], 10) if len(fields) > 3 and fields[3] else None
    except ValueError:
        return MessageName(id=name, parsed=False)
    message_id = unquote_plus(fields[1])
    if not INT32[0] <= priority <= INT32[1] or not _ID.fullmatch(message_id):
        return MessageName(id=name, parsed=False)
    rest = [unquote_plus(f) or None for f in fields[4:7]] + [None] * 3
    return MessageName(
        priority=priority,
        id=message_id,
        kind=fields[2] if fields[2] in ("T", "B", "M", "O", "S") else "T",
        expiration=expiration or None,
        correlation=rest[0],
        reply_to=rest[1],
        type=rest[2],
        properties=_properties(".".join(fields[7:])),
    )


def _properties(text: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pair in filter(None, text.split("&")):
        raw_name, sep, raw_value = pair.partition("=")
        name = unquote_plus(raw_name)
        if not sep or not name:
            raise MessageError(f"the property {pair!r} is not name=value with a type letter")
        found[name[:-1]] = _value(name[-1], unquote_plus(raw_value), name)
    return found


def _value(letter: str, text: str, name: str) -> Any:
    try:
        if letter == "B":
            return text.lower() == "true"  # Java's Boolean.valueOf
        if letter in _RANGES:
            value = int(text, 10)
            bits = _RANGES[letter]
            if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
                raise ValueError(f"out of the {bits}-bit range")
            return value
        if letter in ("F", "D"):
            return float(text)
        if letter == "J":
            return json.loads(text)
    except ValueError as exc:
        raise MessageError(f"the property {name!r} is not a valid {letter} value: {exc}") from None
    return text


def _typed(value: Any) -> tuple[str, str]:
    """A property's type letter and text; JSON values other than scalars go as text."""
    if isinstance(value, bool):
        return "B", "true" if value else "false"
    if isinstance(value, int) and INT32[0] <= value <= INT32[1]:
        return "I", str(value)
    if isinstance(value, int) and _INT64[0] <= value <= _INT64[1]:
        return "L", str(value)
    if isinstance(value, float):
        return "D", repr(value)
    if isinstance(value, str):
        return "S", value
    # Lists, objects, null and integers past 64 bits: as JSON, read back as they were.
    return "J", json.dumps(value, separators=(",", ":"), ensure_ascii=False)
