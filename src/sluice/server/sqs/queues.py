"""SQS's queue operations on sluice queues: CreateQueue, GetQueueUrl, ListQueues,
DeleteQueue, Get/SetQueueAttributes, PurgeQueue, tags, ListDeadLetterSourceQueues.

A queue made here is an ordinary sluice queue of the same name (rules, topics, the
console, Spark and the CLI see it), and any sluice queue is an SQS queue with SQS's
default attributes. What SQS says of it beyond sluice's catalog is its SQS record
(settings.py)."""

from __future__ import annotations

import json
import re
from typing import Any

from sluice.errors import QueueInUse
from sluice.server.sqs.context import Call
from sluice.server.sqs.errors import SqsError, integer, invalid_parameter, no_queue
from sluice.server.sqs.settings import (
    COMPUTED,
    SETTABLE,
    check_name,
    checked,
    redrive_target,
)

__all__ = ["ASYNC_OPERATIONS", "OPERATIONS", "PURGE_EVERY"]

PURGE_EVERY = 60.0
"""Seconds between two purges of one queue (SQS's PurgeQueueInProgress)."""

MAX_TAGS = 50
_TAG_KEY = re.compile(r"^[\w.:/=+\-@ ]{1,128}$")


def _tags(given: Any, queue: str) -> dict[str, str]:
    if given is None:
        return {}
    if not isinstance(given, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in given.items()
    ):
        raise invalid_parameter("Tags must be a map of strings to strings")
    for key, value in given.items():
        if not _TAG_KEY.match(key) or len(value) > 256:
            raise invalid_parameter(f"Tag {key!r} is invalid: keys 1-128, values 0-256 characters")
    if len(given) > MAX_TAGS:
        raise invalid_parameter(f"Too many tags added for queue {queue}.")
    return dict(given)


def _record(call: Call, name: str) -> tuple[dict[str, str], dict[str, str]]:
    stored = call.db.backend.sqs_queue_find(name)
    if stored is None:
        return {}, {}
    return json.loads(stored.attributes), json.loads(stored.tags)


def _save(
    call: Call, name: str, attributes: dict[str, str], tags: dict[str, str], *, new: bool = False
) -> bool:
    """Write the queue's SQS record; ``new``: only if it has none. True if this wrote it."""
    record = (json.dumps(attributes, sort_keys=True), json.dumps(tags, sort_keys=True))
    written = True
    if new:
        written = call.db.backend.sqs_queue_add(name, *record, call.db.clock.now())
    else:
        call.db.backend.sqs_queue_put(name, *record, call.db.clock.now())
    call.state.forget(name)
    return written


def _redrive(call: Call, name: str, policy: str | None, *, fifo: bool) -> None:
    """The queue's sluice error queue and attempts, from its RedrivePolicy (its
    dead-letter queue of its own kind: FIFO for a FIFO queue, else standard)."""
    if not policy:
        call.db.alter_queue(name, error_queue=None, max_attempts=None)
        return
    target, receives = redrive_target(policy)
    if target == name:
        raise invalid_parameter("a queue cannot be its own dead-letter queue")
    try:
        call.spec(target)
    except SqsError:
        raise SqsError(
            "AWS.SimpleQueueService.NonExistentQueue",
            f"Could not find DLQ for {policy}: the dead-letter queue {target!r} does not exist",
        ) from None
    if call.settings(target).fifo != fifo:
        raise invalid_parameter(
            f"Value {policy} for parameter RedrivePolicy is invalid. Reason: the dead-letter "
            f"queue of a {'FIFO' if fifo else 'standard'} queue must be a "
            f"{'FIFO' if fifo else 'standard'} queue too."
        )
    call.db.alter_queue(name, error_queue=target, max_attempts=receives)


def create_queue(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("QueueName")
    if name is None:
        raise SqsError("MissingParameter", "The request must contain the parameter QueueName.")
    given = params.get("Attributes") or {}
    fifo = isinstance(given, dict) and str(given.get("FifoQueue", "false")).lower() == "true"
    check_name(name, fifo)
    attributes = checked(given, fifo=fifo, creating=True)
    if not fifo:
        attributes.pop("FifoQueue", None)
    attributes = {k: v for k, v in attributes.items() if v != ""}
    tags = _tags(params.get("tags", params.get("Tags")), str(name))
    call.need(name, "manage")
    # The record is written first, and only if there is none: a CreateQueue of the same
    # name at the same time (a Celery worker and its producer each declare their queue)
    # then compares with it, where it used to find the queue made, its record not yet
    # written, and SQS's defaults, and refused with QueueAlreadyExists.
    # (A queue's record goes with the queue, however it is dropped: sql_backend.drop_queue.)
    existed = name in {spec.name for spec in call.db.queues()}
    if not existed and _save(call, name, attributes, tags, new=True):
        call.db.create_queue(name, exist_ok=True)
        try:
            if attributes.get("RedrivePolicy"):
                _redrive(call, name, attributes["RedrivePolicy"], fifo=fifo)
        except Exception:
            call.db.drop_queue(name)  # nothing half made: its record goes with it
            call.state.forget(name)
            raise
        return {"QueueUrl": call.url(name)}
    if not existed:  # another CreateQueue's record: it may not have made the queue yet
        call.db.create_queue(name, exist_ok=True)
    current, _ = _record(call, name)
    for key, value in attributes.items():
        if current.get(key, call.settings(name).shown().get(key)) != value:
            raise SqsError(
                "QueueAlreadyExists",
                f"A queue already exists with the same name and a different value for "
                f"attribute {key}",
            )
    if not existed and attributes.get("RedrivePolicy"):  # as the other makes it
        _redrive(call, name, attributes["RedrivePolicy"], fifo=fifo)
    return {"QueueUrl": call.url(name)}


def get_queue_url(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("QueueName")
    if not isinstance(name, str):
        raise SqsError("MissingParameter", "The request must contain the parameter QueueName.")
    if not call.sees(name):
        raise no_queue()
    call.spec(name)
    return {"QueueUrl": call.url(name)}


def list_queues(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    prefix = params.get("QueueNamePrefix") or ""
    limit = integer(params, "MaxResults", 1000, 1, 1000)
    after = params.get("NextToken") or ""
    if not isinstance(prefix, str) or not isinstance(after, str):
        raise invalid_parameter("QueueNamePrefix and NextToken are strings")
    names = sorted(
        spec.name
        for spec in call.db.queues()
        if spec.kind != "topic"
        and spec.name.startswith(prefix)
        and spec.name > after
        and call.sees(spec.name)
    )
    out: dict[str, Any] = {}
    if names:
        out["QueueUrls"] = [call.url(n) for n in names[:limit]]
    if "MaxResults" in params and len(names) > limit:
        out["NextToken"] = names[limit - 1]
    return out


async def delete_queue(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = await call.offload(call.queue_of, params, "manage")
    await call.leases.end_queue(name)  # what this server leased from it goes back first
    return await call.offload(_drop, call, name)


def _drop(call: Call, name: str) -> dict[str, Any]:
    # SQS deletes a dead-letter queue its sources still name; sluice refuses to drop an
    # error queue, so the sources lose their redrive first, as SQS's would be void.
    for spec in call.db.queues():
        if spec.error_queue == name:
            call.db.alter_queue(spec.name, error_queue=None, max_attempts=None)
    try:
        call.db.drop_queue(name)
    except QueueInUse as exc:
        raise invalid_parameter(f"the queue cannot be deleted now: {exc}") from None
    call.state.forget(name)  # its record and deduplication ids went with it
    return {}


def get_queue_attributes(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = call.queue_of(params)
    asked = params.get("AttributeNames") or []
    if not isinstance(asked, list) or not all(isinstance(a, str) for a in asked):
        raise invalid_parameter("AttributeNames must be a list of names")
    for a in asked:
        if a != "All" and a not in SETTABLE and a not in COMPUTED and a != "FifoQueue":
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {a}.")
    if not asked:
        return {}
    settings = call.settings(name)
    stored = call.db.backend.sqs_queue_find(name)
    counts = call.db.queue(name).stats()
    created = stored.created_at if stored else 0.0
    every = {
        **settings.shown(),
        "ApproximateNumberOfMessages": str(counts["ready"]),
        "ApproximateNumberOfMessagesNotVisible": str(counts["claimed"]),
        "ApproximateNumberOfMessagesDelayed": str(counts["delayed"]),
        "CreatedTimestamp": str(int(created)),
        "LastModifiedTimestamp": str(int(stored.changed_at if stored else created)),
        "QueueArn": call.arn(name),
    }
    spec = call.spec(name)
    if spec.error_queue and spec.max_attempts and "RedrivePolicy" not in every:
        every["RedrivePolicy"] = json.dumps(
            {
                "deadLetterTargetArn": call.arn(spec.error_queue),
                "maxReceiveCount": spec.max_attempts,
            }
        )
    chosen = every if "All" in asked else {a: every[a] for a in asked if a in every}
    return {"Attributes": chosen} if chosen else {}


def set_queue_attributes(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = call.queue_of(params, "manage")
    current, tags = _record(call, name)
    given = params.get("Attributes")
    if given is None:
        raise SqsError("MissingParameter", "The request must contain the parameter Attributes.")
    changes = checked(given, fifo=current.get("FifoQueue") == "true", creating=False)
    if "RedrivePolicy" in changes:
        _redrive(
            call, name, changes["RedrivePolicy"] or None, fifo=current.get("FifoQueue") == "true"
        )
    merged = {**current, **changes}
    _save(call, name, {k: v for k, v in merged.items() if v != ""}, tags)
    return {}


async def purge_queue(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = await call.offload(_may_purge, call, params)
    # SQS's purge deletes the messages in flight too: those this server leased go first.
    for lease in call.leases.take_queue(name):
        await lease.message.ack()
        call.state.remember(call.state.deleted, lease.token, name)
    await call.offload(lambda: call.db.queue(name).purge("ready"))
    return {}


def _may_purge(call: Call, params: dict[str, Any]) -> str:
    name = call.queue_of(params, "manage")
    now = call.db.clock.now()
    with call.state.lock:
        last = call.state.purged.get(name)
        if last is not None and now - last < PURGE_EVERY:
            raise SqsError(
                "AWS.SimpleQueueService.PurgeQueueInProgress",
                f"Only one PurgeQueue operation on {name} is allowed every 60 seconds.",
            )
        call.state.purged[name] = now
    return name


def tag_queue(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = call.queue_of(params, "manage")
    given = _tags(params.get("Tags"), name)
    if not given:
        raise SqsError("MissingParameter", "The request must contain the parameter Tags.")
    attributes, tags = _record(call, name)
    merged = {**tags, **given}
    _tags(merged, name)
    _save(call, name, attributes, merged)
    return {}


def untag_queue(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = call.queue_of(params, "manage")
    keys = params.get("TagKeys")
    if keys is None:
        raise SqsError("MissingParameter", "The request must contain the parameter TagKeys.")
    if (
        not isinstance(keys, list)
        or not keys
        or not all(isinstance(k, str) and 1 <= len(k) <= 128 for k in keys)
    ):
        raise invalid_parameter("Tag keys must be between 1 and 128 characters in length.")
    attributes, tags = _record(call, name)
    _save(call, name, attributes, {k: v for k, v in tags.items() if k not in keys})
    return {}


def list_queue_tags(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = call.queue_of(params)
    _, tags = _record(call, name)
    return {"Tags": tags} if tags else {}


def list_dead_letter_source_queues(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = call.queue_of(params)
    limit = integer(params, "MaxResults", 1000, 1, 1000)
    after = params.get("NextToken") or ""
    names = sorted(
        s.name
        for s in call.db.queues()
        if s.error_queue == name and s.name > str(after) and call.sees(s.name)
    )
    out: dict[str, Any] = {"queueUrls": [call.url(n) for n in names[:limit]]}
    if "MaxResults" in params and len(names) > limit:
        out["NextToken"] = names[limit - 1]
    return out


OPERATIONS = {
    "CreateQueue": create_queue,
    "GetQueueUrl": get_queue_url,
    "ListQueues": list_queues,
    "GetQueueAttributes": get_queue_attributes,
    "SetQueueAttributes": set_queue_attributes,
    "TagQueue": tag_queue,
    "UntagQueue": untag_queue,
    "ListQueueTags": list_queue_tags,
    "ListDeadLetterSourceQueues": list_dead_letter_source_queues,
}
"""The queue operations, each run in a thread (they block on the database)."""

ASYNC_OPERATIONS = {"DeleteQueue": delete_queue, "PurgeQueue": purge_queue}
"""The queue operations run on the event loop."""
