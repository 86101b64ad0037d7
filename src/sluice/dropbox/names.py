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
  double, S string; an unknown letter is a string).
- Values are URL-encoded (UTF-8, ``+`` for a space) with ``.`` as ``%2E``.
  Trailing empty fields are left out; interior ones stay empty (``..``).
- A name whose priority, id or expiration does not parse is taken whole as the
  message's id, with the defaults for the rest (so a message can always be
  consumed, whatever its name says).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus, unquote_plus

from sluice.errors import MessageError

__all__ = ["DEFAULT_PRIORITY", "MessageName", "encode_value", "parse_name"]

DEFAULT_PRIORITY = 4
"""JMS's default priority, DropboxMQ's for a name that does not parse."""

_ID = re.compile(r"(\d{1,18})-(\d{1,19})")
_INT32 = (-(2**31), 2**31 - 1)
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
        props = "&".join(
            f"{encode_value(name + letter)}={encode_value(text)}"
            for name, (letter, text) in ((n, _typed(v)) for n, v in self.properties.items())
        )
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


def encode_value(text: str) -> str:
    """URL-encode as Java's URLEncoder does, and ``.`` (the field separator) too."""
    return quote_plus(text, safe="*").replace(".", "%2E").replace("~", "%7E")


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
    if not _INT32[0] <= priority <= _INT32[1] or not _ID.fullmatch(message_id):
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
        if not sep or len(name) < 2:
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
    except ValueError as exc:
        raise MessageError(f"the property {name!r} is not a valid {letter} value: {exc}") from None
    return text


def _typed(value: Any) -> tuple[str, str]:
    """A property's type letter and text; JSON values other than scalars go as text."""
    if isinstance(value, bool):
        return "B", "true" if value else "false"
    if isinstance(value, int):
        return ("I" if _INT32[0] <= value <= _INT32[1] else "L"), str(value)
    if isinstance(value, float):
        return "D", repr(value)
    if isinstance(value, str):
        return "S", value
    return "S", json.dumps(value, separators=(",", ":"))
