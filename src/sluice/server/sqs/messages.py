"""SQS's message operations: SendMessage(Batch), ReceiveMessage, DeleteMessage(Batch),
ChangeMessageVisibility(Batch), on sluice's machinery.

A message is a sluice message whose body is the SQS body as text (``text/plain``), with
its SQS attributes in the property ``sqs`` (a selector reads ``props.sqs.attributes``).
A receive leases each message as ``/api/queues/{name}/leases`` does (server/leases.py):
its receipt handle is the lease's token and the visibility timeout the lease's length,
so a message not deleted in time goes back to its place with an attempt counted
(``ApproximateReceiveCount``), and its handle is then stale. DelaySeconds is a delay,
MessageRetentionPeriod a ttl, a FIFO MessageGroupId a sluice group (its messages are
taken in order, one at a time), and a deduplication id is written by the commit of its
message's enqueue (sql/*/sqs.sql) and kept five minutes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from sluice.backends.records import Effect
from sluice.backends.sqs import dedup_owner
from sluice.errors import Conflict
from sluice.server.leases import MAX_LEASE, Lease
from sluice.server.problems import Problem
from sluice.server.sqs import attributes
from sluice.server.sqs.attributes import Attributes
from sluice.server.sqs.context import Call
from sluice.server.sqs.errors import SqsError, integer, invalid_parameter, missing_parameter
from sluice.server.sqs.settings import QueueSettings

__all__ = ["ASYNC_OPERATIONS", "DEDUP_WINDOW", "OPERATIONS", "TEXT"]

TEXT = "text/plain"
"""The content type of a message sent through SQS: its body is text."""

DEDUP_WINDOW = 300.0
"""Seconds a FIFO queue remembers a deduplication id (SQS's five minutes)."""

MAX_BATCH = 10
_ENTRY_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_INVALID_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SYSTEM = (
    "All",
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "SequenceNumber",
    "MessageDeduplicationId",
    "MessageGroupId",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
)
_sequence = itertools.count(1)


@dataclass(slots=True)
class Outgoing:
    """A message to send, checked."""

    body: str
    attributes: Attributes
    system: Attributes
    delay: int
    group: str | None = None
    dedup: str | None = None
    answer: dict[str, str] = field(default_factory=dict)

    def sqs(self, sender: str, sequence: str | None) -> dict[str, Any]:
        """The message's ``sqs`` property."""
        found: dict[str, Any] = {"sender": sender}
        if self.attributes:
            found["attributes"] = self.attributes
        if "AWSTraceHeader" in self.system:
            found["trace"] = self.system["AWSTraceHeader"]["StringValue"]
        if self.dedup is not None:
            found["dedup"] = self.dedup
        if sequence is not None:
            found["sequence"] = sequence
        return found


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def _outgoing(call: Call, settings: QueueSettings, params: dict[str, Any]) -> Outgoing:
    body = params.get("MessageBody")
    if body is None:
        raise missing_parameter("MessageBody")
    if not isinstance(body, str) or body == "":
        raise invalid_parameter("The request must contain a MessageBody of 1 or more characters.")
    if _INVALID_TEXT.search(body):
        raise SqsError(
            "InvalidMessageContents",
            "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD "
            "| #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )
    given = attributes.checked(params.get("MessageAttributes"))
    system = attributes.checked(params.get("MessageSystemAttributes"), system=True)
    limit = settings.number("MaximumMessageSize")
    if len(body.encode("utf-8")) + attributes.size_of(given) > limit:
        raise invalid_parameter(
            f"One or more parameters are invalid. Reason: Message must be "
            f"shorter than {limit} bytes."
        )
    delay = params.get("DelaySeconds")
    if delay is not None and settings.fifo:
        raise invalid_parameter(
            f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request include "
            "parameter that is not valid for this queue type."
        )
    seconds = (
        settings.number("DelaySeconds")
        if delay is None
        else integer(params, "DelaySeconds", 0, 0, 900, why="DelaySeconds must be >= 0 and <= 900")
    )
    out = Outgoing(body, given, system, seconds)
    out.answer = {"MD5OfMessageBody": _md5(body)}
    if given:
        out.answer["MD5OfMessageAttributes"] = attributes.md5_of(given)
    if system:
        out.answer["MD5OfMessageSystemAttributes"] = attributes.md5_of(system)
    if settings.fifo:
        _fifo(out, settings, params)
    return out


def _fifo(out: Outgoing, settings: QueueSettings, params: dict[str, Any]) -> None:
    group = params.get("MessageGroupId")
    if group is None:
        raise missing_parameter("MessageGroupId")
    dedup = params.get("MessageDeduplicationId")
    if dedup is None and settings.content_dedup:
        dedup = hashlib.sha256(out.body.encode("utf-8")).hexdigest()
    if dedup is None:
        raise invalid_parameter(
            "The queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId provided explicitly"
        )
    for name, value in (("MessageGroupId", group), ("MessageDeduplicationId", dedup)):
        if not isinstance(value, str) or not re.fullmatch(r"[!-~]{1,128}", value):
            raise invalid_parameter(
                f"Value {value} for parameter {name} is invalid. Reason: "
                "1-128 printable ASCII characters."
            )
    out.group, out.dedup = group, dedup


def _put(call: Call, name: str, settings: QueueSettings, batch: list[Outgoing]) -> None:
    """Enqueue ``batch`` (one transaction; a FIFO message with its deduplication id, whose
    duplicate within the window is answered as the first and not stored)."""
    ttl = float(settings.number("MessageRetentionPeriod"))
    if not settings.fifo:
        with call.db.transaction() as tx:
            for out in batch:
                out.answer["MessageId"] = tx.enqueue(
                    name,
                    out.body,
                    delay=float(out.delay),
                    properties={"sqs": out.sqs(call.who.name, None)},
                    content_type=TEXT,
                    ttl=ttl,
                )
        return
    per_group = settings.attributes.get("DeduplicationScope") == "messageGroup"
    for out in batch:
        key = f"{out.group}/{out.dedup}" if per_group else str(out.dedup)
        sequence = f"{call.db.clock.now() * 1e6:020.0f}{next(_sequence) % 10**6:06d}"
        try:
            with call.db.transaction() as tx:
                made = tx.enqueue(
                    name,
                    out.body,
                    group=out.group,
                    properties={"sqs": out.sqs(call.who.name, sequence)},
                    content_type=TEXT,
                    ttl=ttl,
                )
                answer = {"MessageId": made, "SequenceNumber": sequence}
                now = call.db.clock.now()
                tx.add_effect(
                    Effect(
                        "sqs_dedup",
                        {
                            "owner": dedup_owner(name),
                            "key": key,
                            "answer": json.dumps(answer),
                            "now": now,
                            "since": now - DEDUP_WINDOW,
                        },
                        1,
                    )
                )
        except Conflict:
            kept = call.db.backend.sqs_dedup_find(name, key, call.db.clock.now() - DEDUP_WINDOW)
            if kept is None:  # the first one's window ended meanwhile: a new message
                raise
            answer = json.loads(kept)
        out.answer.update(answer)


def send_message(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = call.queue_of(params, "produce")
    settings = call.settings(name)
    out = _outgoing(call, settings, params)
    _put(call, name, settings, [out])
    return out.answer


def _entries(params: dict[str, Any], what: str) -> list[dict[str, Any]]:
    entries = params.get("Entries")
    if entries is None:
        raise missing_parameter("Entries")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid_parameter("Entries must be a list of entries")
    if not entries:
        raise SqsError(
            "AWS.SimpleQueueService.EmptyBatchRequest",
            f"There should be at least one {what}RequestEntry in the request.",
        )
    if len(entries) > MAX_BATCH:
        raise SqsError(
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}.",
        )
    seen: set[str] = set()
    for entry in entries:
        ident = entry.get("Id")
        if not isinstance(ident, str) or not _ENTRY_ID.match(ident):
            raise SqsError(
                "AWS.SimpleQueueService.InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, "
                "hyphens and underscores. It can be at most 80 letters long.",
            )
        if ident in seen:
            raise SqsError(
                "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", f"Id {ident} repeated."
            )
        seen.add(ident)
    return entries


def _failed(ident: str, error: SqsError) -> dict[str, Any]:
    return {"Id": ident, "SenderFault": error.sender, "Code": error.code, "Message": error.message}


def send_message_batch(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = call.queue_of(params, "produce")
    entries = _entries(params, "SendMessageBatch")
    settings = call.settings(name)
    total = sum(len(str(e.get("MessageBody", "")).encode("utf-8")) for e in entries)
    if total > settings.number("MaximumMessageSize"):
        raise SqsError(
            "AWS.SimpleQueueService.BatchRequestTooLong",
            f"Batch requests cannot be longer than "
            f"{settings.number('MaximumMessageSize')} bytes. "
            f"You have sent {total} bytes.",
        )
    good: list[tuple[str, Outgoing]] = []
    failed: list[dict[str, Any]] = []
    for entry in entries:
        try:
            good.append((entry["Id"], _outgoing(call, settings, entry)))
        except SqsError as exc:
            failed.append(_failed(entry["Id"], exc))
    _put(call, name, settings, [out for _, out in good])
    out: dict[str, Any] = {"Successful": [{"Id": i, **o.answer} for i, o in good]}
    if failed:
        out["Failed"] = failed
    return out


async def receive_message(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name, settings = await anyio.to_thread.run_sync(_consumed, call, params)
    most = integer(
        params,
        "MaxNumberOfMessages",
        1,
        1,
        10,
        why="Value {} for parameter MaxNumberOfMessages is invalid. Reason: must be "
        "between 1 and 10, if provided.",
    )
    wait = integer(
        params,
        "WaitTimeSeconds",
        settings.number("ReceiveMessageWaitTimeSeconds"),
        0,
        20,
        why="Value {} for parameter WaitTimeSeconds is invalid. Reason: must "
        "be &lt;= 0 and &gt;= 20 if provided.",
    )
    seconds = integer(
        params,
        "VisibilityTimeout",
        settings.number("VisibilityTimeout"),
        0,
        int(MAX_LEASE),
        why="Value {} for parameter VisibilityTimeout is invalid. "
        "Reason: must be between 0 and 43200.",
    )
    system = _names(params.get("AttributeNames")) | _names(
        params.get("MessageSystemAttributeNames")
    )
    wanted = params.get("MessageAttributeNames")
    attributes.asked_for({}, wanted)  # checks the names' form
    queue = await (await call.aio.get()).queue(name)
    messages: list[dict[str, Any]] = []
    pause = float(wait)
    while len(messages) < most:
        m = await queue.get(wait=pause)
        if m is None:
            break
        lease = call.leases.add(m, float(seconds))
        messages.append(_received(call, lease, system, wanted))
        pause = 0.0
    return {"Messages": messages} if messages else {}


def _consumed(call: Call, params: dict[str, Any]) -> tuple[str, QueueSettings]:
    name = call.queue_of(params, "consume")
    return name, call.settings(name)


def _names(given: Any) -> set[str]:
    if given is None:
        return set()
    if not isinstance(given, list) or not all(isinstance(n, str) for n in given):
        raise invalid_parameter("AttributeNames must be a list of names")
    for n in given:
        if n not in _SYSTEM:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {n}.")
    return set(given)


def _body(m: Any) -> str:
    body = m.body
    if isinstance(body, str):
        return body
    if isinstance(body, bytes):
        return body.decode("utf-8", errors="replace")
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def _received(call: Call, lease: Lease, system: set[str], wanted: Any) -> dict[str, Any]:
    m = lease.message.message
    found = m.properties.get("sqs") if m.properties else None
    sqs: dict[str, Any] = found if isinstance(found, dict) else {}
    body = _body(m)
    out: dict[str, Any] = {
        "MessageId": m.id,
        "ReceiptHandle": lease.token,
        "MD5OfBody": _md5(body),
        "Body": body,
    }
    every = {
        "SenderId": str(sqs.get("sender", "sluice")),
        "SentTimestamp": str(int(m.enqueued * 1000)),
        "ApproximateReceiveCount": str(m.attempts + 1),
        "ApproximateFirstReceiveTimestamp": str(int(max(m.available, m.enqueued) * 1000)),
    }
    if m.group is not None:
        every["MessageGroupId"] = m.group
    for key, field_name in (
        ("dedup", "MessageDeduplicationId"),
        ("sequence", "SequenceNumber"),
        ("trace", "AWSTraceHeader"),
    ):
        if key in sqs:
            every[field_name] = str(sqs[key])
    if m.origin_queue:
        every["DeadLetterQueueSourceArn"] = call.arn(m.origin_queue)
    chosen = every if "All" in system else {k: v for k, v in every.items() if k in system}
    if chosen:
        out["Attributes"] = chosen
    given = attributes.asked_for(sqs.get("attributes") or {}, wanted)
    if given:
        out["MessageAttributes"] = given
        out["MD5OfMessageAttributes"] = attributes.md5_of(given)
    return out


def _lease(call: Call, name: str, handle: Any) -> Lease:
    if handle is None:
        raise missing_parameter("ReceiptHandle")
    try:
        lease = call.leases.peek(handle) if isinstance(handle, str) else None
    except Problem:
        lease = None
    if lease is None or lease.message.queue != name:
        raise SqsError(
            "ReceiptHandleIsInvalid",
            f'The input receipt handle "{handle}" is not a valid receipt handle: '
            "unknown, or stale (deleted already, or its visibility timeout ended "
            "and the message was received again)",
        )
    return lease


async def _delete(call: Call, name: str, handle: Any) -> None:
    lease = _lease(call, name, handle)
    call.leases.take(lease.token)
    await lease.message.ack()


async def _change(call: Call, name: str, handle: Any, params: dict[str, Any]) -> None:
    if "VisibilityTimeout" not in params:
        raise missing_parameter("VisibilityTimeout")
    seconds = integer(
        params,
        "VisibilityTimeout",
        0,
        0,
        int(MAX_LEASE),
        why="Value {} for parameter VisibilityTimeout is invalid. Reason: must "
        "be between 0 and 43200.",
    )
    lease = _lease(call, name, handle)
    if lease.ends_by - call.db.clock.now() < seconds:
        raise invalid_parameter(
            f"Value {seconds} for parameter VisibilityTimeout is invalid. Reason: Total "
            "VisibilityTimeout for the message is beyond the limit [43200 seconds]"
        )
    if seconds == 0:
        call.leases.take(lease.token)
        await lease.message.release()
    else:
        call.leases.extend(lease.token, float(seconds))


async def delete_message(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = await anyio.to_thread.run_sync(call.queue_of, params, "consume")
    await _delete(call, name, params.get("ReceiptHandle"))
    return {}


async def change_message_visibility(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = await anyio.to_thread.run_sync(call.queue_of, params, "consume")
    await _change(call, name, params.get("ReceiptHandle"), params)
    return {}


async def _batch(
    call: Call,
    params: dict[str, Any],
    what: str,
    each: Callable[[str, dict[str, Any]], Awaitable[None]],
) -> dict[str, Any]:
    entries = _entries(params, what)
    done: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for entry in entries:
        try:
            await each(entry["Id"], entry)
            done.append({"Id": entry["Id"]})
        except SqsError as exc:
            failed.append(_failed(entry["Id"], exc))
    out: dict[str, Any] = {"Successful": done}
    if failed:
        out["Failed"] = failed
    return out


async def delete_message_batch(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = await anyio.to_thread.run_sync(call.queue_of, params, "consume")

    async def each(_: str, entry: dict[str, Any]) -> None:
        await _delete(call, name, entry.get("ReceiptHandle"))

    return await _batch(call, params, "DeleteMessageBatch", each)


async def change_message_visibility_batch(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = await anyio.to_thread.run_sync(call.queue_of, params, "consume")

    async def each(_: str, entry: dict[str, Any]) -> None:
        await _change(call, name, entry.get("ReceiptHandle"), entry)

    return await _batch(call, params, "ChangeMessageVisibilityBatch", each)


OPERATIONS = {"SendMessage": send_message, "SendMessageBatch": send_message_batch}
"""The message operations run in a thread (they commit)."""

ASYNC_OPERATIONS = {
    "ReceiveMessage": receive_message,
    "DeleteMessage": delete_message,
    "DeleteMessageBatch": delete_message_batch,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
}
"""The message operations run on the event loop (sluice.aio: a long poll holds no thread)."""
