"""A queue's SQS attributes: their defaults, their checks, and where sluice keeps them.

Settable attributes are kept as SQS spells them in the queue's SQS record (the
``sqs_queues`` table); ``RedrivePolicy`` is also the queue's sluice ``error_queue`` and
``max_attempts`` (a dead-letter queue is an error queue), so sluice's consumers and
console see it. The counts (``ApproximateNumberOf...``) are read from the queue.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.server.sqs.errors import SqsError, invalid_parameter

__all__ = [
    "COMPUTED",
    "DEFAULTS",
    "FIFO_DEFAULTS",
    "SETTABLE",
    "QueueSettings",
    "check_name",
    "checked",
    "redrive_target",
]

DEFAULTS: dict[str, str] = {
    "DelaySeconds": "0",
    "MaximumMessageSize": "1048576",
    "MessageRetentionPeriod": "345600",
    "ReceiveMessageWaitTimeSeconds": "0",
    "VisibilityTimeout": "30",
    "SqsManagedSseEnabled": "true",
}
"""What a queue has when nothing was said (as SQS answers GetQueueAttributes)."""

FIFO_DEFAULTS: dict[str, str] = {
    "ContentBasedDeduplication": "false",
    "DeduplicationScope": "queue",
    "FifoThroughputLimit": "perQueue",
}
"""What a FIFO queue has besides when nothing was said."""

_RANGES = {
    "DelaySeconds": (0, 900),
    "MaximumMessageSize": (1024, 1048576),
    "MessageRetentionPeriod": (60, 1209600),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "VisibilityTimeout": (0, 43200),
    "KmsDataKeyReusePeriodSeconds": (60, 86400),
}
_CHOICES = {
    "FifoQueue": ("true", "false"),
    "ContentBasedDeduplication": ("true", "false"),
    "SqsManagedSseEnabled": ("true", "false"),
    "DeduplicationScope": ("messageGroup", "queue"),
    "FifoThroughputLimit": ("perQueue", "perMessageGroupId"),
}
_FREE = ("Policy", "RedrivePolicy", "RedriveAllowPolicy", "KmsMasterKeyId")
_FIFO_ONLY = ("ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit")

SETTABLE = frozenset(_RANGES) | frozenset(_CHOICES) | frozenset(_FREE)
"""The attributes CreateQueue and SetQueueAttributes take."""

COMPUTED = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
)
"""The attributes read from the queue itself."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


def check_name(name: Any, fifo: bool) -> str:
    """A queue name SQS allows: 1-80 letters, digits, - and _; a FIFO queue's ends in
    ``.fifo`` (counted)."""
    if not isinstance(name, str):
        raise invalid_parameter("QueueName must be a string")
    stem = name.removesuffix(".fifo") if fifo else name
    if not _NAME.match(stem) or len(name) > 80:
        raise invalid_parameter(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
        )
    if fifo != name.endswith(".fifo"):
        raise invalid_parameter(
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, or "
            "underscores, must end with .fifo suffix and be 1 to 80 in length"
            if fifo
            else "Queue name must end in .fifo for FIFO queues only (set FifoQueue to true)"
        )
    return name


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's SQS attributes as strings, defaults included."""

    attributes: Mapping[str, str]

    def number(self, name: str) -> int:
        return int(self.attributes.get(name, DEFAULTS.get(name, "0")))

    @property
    def fifo(self) -> bool:
        return self.attributes.get("FifoQueue") == "true"

    @property
    def content_dedup(self) -> bool:
        return self.attributes.get("ContentBasedDeduplication") == "true"

    def shown(self) -> dict[str, str]:
        """Every attribute that has a value, as GetQueueAttributes answers it."""
        return {**DEFAULTS, **(FIFO_DEFAULTS if self.fifo else {}), **self.attributes}


def checked(given: Any, *, fifo: bool, creating: bool) -> dict[str, str]:
    """``given`` (a request's Attributes) checked; values as SQS's strings. Empty
    Policy, RedrivePolicy or RedriveAllowPolicy stay empty: they remove the attribute."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise invalid_parameter("Attributes must be a map of attribute names to values")
    out: dict[str, str] = {}
    for name, raw in given.items():
        if name == "FifoQueue" and not creating:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if name not in SETTABLE:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if name in _FIFO_ONLY and not fifo:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        value = _text(name, raw)
        if name in _RANGES:
            low, high = _RANGES[name]
            if not re.fullmatch(r"-?\d{1,12}", value) or not low <= int(value) <= high:
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
            value = str(int(value))
        elif name in _CHOICES:
            value = (
                value.lower()
                if name in ("FifoQueue", "ContentBasedDeduplication", "SqsManagedSseEnabled")
                else value
            )
            if value not in _CHOICES[name]:
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
        elif name in ("Policy", "RedriveAllowPolicy") and value:
            _json_object(name, value)
        out[name] = value
    if out.get("RedrivePolicy"):
        out["RedrivePolicy"] = json.dumps(_redrive(out["RedrivePolicy"]))
    return out


def _text(name: str, raw: Any) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int):
        return str(raw)
    if not isinstance(raw, str):
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    return raw


def _json_object(name: str, value: str) -> dict[str, Any]:
    try:
        found = json.loads(value)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    return found


def _redrive(value: str) -> dict[str, Any]:
    policy = _json_object("RedrivePolicy", value)
    target, count = policy.get("deadLetterTargetArn"), policy.get("maxReceiveCount")
    if not isinstance(target, str) or target.count(":") < 5 or count is None:
        raise SqsError(
            "InvalidParameterValue",
            "Value {} for parameter RedrivePolicy is invalid. Reason: Redrive policy does "
            "not contain mandatory attribute: "
            + ("deadLetterTargetArn." if not isinstance(target, str) else "maxReceiveCount."),
        )
    try:
        receives = int(count)
    except (TypeError, ValueError):
        receives = 0
    if not 1 <= receives <= 1000 or isinstance(count, bool):
        raise SqsError(
            "InvalidParameterValue",
            "Value for parameter RedrivePolicy is invalid. Reason: Invalid value for "
            "maxReceiveCount: must be an integer from 1 to 1000.",
        )
    return {"deadLetterTargetArn": target, "maxReceiveCount": receives}


def redrive_target(policy: str) -> tuple[str, int]:
    """The dead-letter queue's name and the receives before a message goes there."""
    found = json.loads(policy)
    return str(found["deadLetterTargetArn"]).rsplit(":", 1)[1], int(found["maxReceiveCount"])
