"""A sluice message as the payload kombu's virtual transport delivers: the stored kombu
message with its delivery tag and ``redelivered`` filled in (by the worker's channel and by
the consumer process alike)."""

from __future__ import annotations

import logging
from typing import Any

import sluice

__all__ = ["Payload", "as_payload", "delivery_tag"]

Payload = dict[str, Any]

log = logging.getLogger("sluice.contrib.kombu")


def delivery_tag(message: sluice.Message) -> str:
    """The message's tag for this delivery: a later delivery of it has another."""
    return f"{message.id}#{message.attempts}"


def as_payload(message: sluice.Message, *, held: bool) -> Payload | None:
    """kombu's payload of ``message``, or None for one that something other than kombu put
    there: rejected if ``held`` (to the error queue, or kept failed), never lost, never
    handed to a consumer."""
    payload = message.body
    if not isinstance(payload, dict) or not isinstance(payload.get("properties"), dict):
        if held:
            message.reject("not a kombu message (a JSON object with properties)")
        log.warning("message %s of %r is not a kombu message: rejected", message.id, message.queue)
        return None
    redelivered = message.attempts > 0
    properties = payload["properties"]
    properties["delivery_tag"] = delivery_tag(message)
    info = properties.setdefault("delivery_info", {})
    info["redelivered"] = redelivered
    payload["redelivered"] = redelivered
    return payload
