"""Message attributes: SQS's checks of a message's typed attributes, their size and
their MD5 digests (``MD5OfMessageAttributes``, ``MD5OfMessageSystemAttributes``), which
SDKs compare with what they sent."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from sluice.server.sqs.errors import SqsError, invalid_parameter

__all__ = ["MAX_ATTRIBUTES", "asked_for", "checked", "md5_of", "size_of"]

MAX_ATTRIBUTES = 10
"""The most message attributes a message may carry (SQS's limit)."""

Attributes = dict[str, dict[str, str]]
"""Attributes as stored and answered: name -> {DataType, StringValue | BinaryValue}
(a binary value in base64, as the JSON protocol carries it)."""

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
_TYPES = ("String", "Number", "Binary")


def checked(given: Any, *, system: bool = False) -> Attributes:
    """``given`` (a request's MessageAttributes or MessageSystemAttributes) checked as
    SQS checks them; InvalidParameterValue for what SQS refuses."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise invalid_parameter("MessageAttributes must be a map of names to values")
    if len(given) > MAX_ATTRIBUTES:
        raise invalid_parameter(
            f"Number of message attributes [{len(given)}] exceeds the allowed maximum "
            f"[{MAX_ATTRIBUTES}]."
        )
    out: Attributes = {}
    for name, value in given.items():
        if system and name != "AWSTraceHeader":
            raise invalid_parameter(
                f"Message system attribute name '{name}' is invalid: only AWSTraceHeader is"
            )
        _check_name(name)
        out[name] = _value(name, value)
    return out


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise invalid_parameter(
            f"The message attribute name '{name}' is invalid. Attribute name can contain "
            "A-Z, a-z, 0-9, underscore (_), hyphen (-), and period (.) characters."
        )
    if (
        name.startswith(".")
        or name.endswith(".")
        or ".." in name
        or name.lower().startswith(("aws.", "amazon."))
    ):
        raise invalid_parameter(
            f"The message attribute name '{name}' is invalid: no leading, trailing or "
            "double period, and not starting with AWS. or Amazon. (reserved)"
        )


def _value(name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise invalid_parameter(f"The message attribute '{name}' must be a map")
    kind = value.get("DataType")
    if not kind:
        raise invalid_parameter(
            f"The message attribute '{name}' must contain non-empty message attribute value."
        )
    if not isinstance(kind, str) or kind.split(".", 1)[0] not in _TYPES or len(kind) > 256:
        raise invalid_parameter(
            f"The message attribute '{name}' has an invalid message attribute type, the set "
            "of supported type prefixes is Binary, Number, and String."
        )
    if value.get("StringListValues") or value.get("BinaryListValues"):
        raise invalid_parameter(
            "StringListValues and BinaryListValues are reserved by SQS and not supported"
        )
    base = kind.split(".", 1)[0]
    field = "BinaryValue" if base == "Binary" else "StringValue"
    given = value.get(field)
    if not isinstance(given, str) or given == "":
        raise invalid_parameter(
            f"The message attribute '{name}' must contain non-empty message attribute value "
            f"for message attribute type '{base}'."
        )
    if base == "Number":
        try:
            Decimal(given)
        except InvalidOperation:
            raise invalid_parameter(
                f"Can't cast message attribute '{name}' value {given!r} to a number."
            ) from None
    if base == "Binary":
        try:
            base64.b64decode(given, validate=True)
        except (binascii.Error, ValueError):
            raise invalid_parameter(
                f"The message attribute '{name}' has a BinaryValue that is not base64."
            ) from None
    return {"DataType": kind, field: given}


def size_of(attributes: Attributes) -> int:
    """Bytes the attributes count toward the message's size: names, types and values."""
    total = 0
    for name, value in attributes.items():
        total += len(name.encode()) + len(value["DataType"].encode())
        if "BinaryValue" in value:
            total += len(base64.b64decode(value["BinaryValue"]))
        else:
            total += len(value["StringValue"].encode())
    return total


def md5_of(attributes: Attributes) -> str:
    """SQS's MD5 of message attributes: by name, each name, type and value with its
    length (4 bytes, big-endian) and a transport byte (1 string, 2 binary)."""
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        value = attributes[name]
        for text in (name, value["DataType"]):
            raw = text.encode("utf-8")
            digest.update(struct.pack(">I", len(raw)) + raw)
        if "BinaryValue" in value:
            data = base64.b64decode(value["BinaryValue"])
            digest.update(b"\x02" + struct.pack(">I", len(data)) + data)
        else:
            data = value["StringValue"].encode("utf-8")
            digest.update(b"\x01" + struct.pack(">I", len(data)) + data)
    return digest.hexdigest()


def asked_for(attributes: Attributes, names: Any) -> Attributes:
    """The attributes a ReceiveMessage's MessageAttributeNames asks for: ``All`` or
    ``.*``, names, and prefixes followed by ``.*`` (``Custom.*``: every name that starts
    with ``Custom``)."""
    if not names:
        return {}
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SqsError("InvalidParameterValue", "MessageAttributeNames must be a list of names")
    if "All" in names or ".*" in names:
        return dict(attributes)
    prefixes = tuple(n[:-2] for n in names if n.endswith(".*"))
    return {k: v for k, v in attributes.items() if k in names or k.startswith(prefixes or ("\0",))}
