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
from dataclasses import dataclass, field
from typing import Any

from sluice.aio import AsyncMessage
from sluice.backends.records import Effect
from sluice.backends.sqs import dedup_owner
from sluice.errors import Conflict
from sluice.server.leases import MAX_LEASE, Lease
from sluice.server.sqs import attributes, batches, held
from sluice.server.sqs.attributes import Attributes
from sluice.server.sqs.context import Call
from sluice.server.sqs.errors import SqsError, integer, invalid_parameter, missing_parameter
from sluice.server.sqs.settings import QueueSettings

__all__ = ["ASYNC_OPERATIONS", "DEDUP_WINDOW", "OPERATIONS", "TEXT", "fifo_ids", "message_id"]

TEXT = "text/plain"
"""The content type of a message sent through SQS: its body is text."""

DEDUP_WINDOW = 300.0
"""Seconds a FIFO queue remembers a deduplication id (SQS's five minutes)."""

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
    """A FIFO message's sluice group."""
    dedup: str | None = None
    shown_group: str | None = None
    """A standard queue's message's MessageGroupId: shown, not a sluice group."""
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
        if self.shown_group is not None:
            found["group"] = self.shown_group
        if sequence is not None:
            found["sequence"] = sequence
        return found


def message_id(sluice_id: str) -> str:
    """The SQS MessageId of the sluice message ``sluice_id`` ("S/T/M" as "S-T-M"): clients
    use MessageIds as batch entry ids, which allow no slash."""
    return sluice_id.replace("/", "-")


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
    seconds = (
        settings.number("DelaySeconds")
        if delay is None
        else integer(
            params,
            "DelaySeconds",
            0,
            0,
            900,
            why="Value {} for parameter DelaySeconds is invalid. Reason: DelaySeconds must "
            "be >= 0 and <= 900.",
        )
    )
    if settings.fifo and delay is not None and seconds:
        raise invalid_parameter(
            f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request "
            "include parameter that is not valid for this queue type."
        )
    if settings.fifo:  # a FIFO queue's delay is the queue's (a message's may only be 0)
        seconds = settings.number("DelaySeconds")
    out = Outgoing(body, given, system, seconds)
    out.answer = {"MD5OfMessageBody": _md5(body)}
    if given:
        out.answer["MD5OfMessageAttributes"] = attributes.md5_of(given)
    if system:
        out.answer["MD5OfMessageSystemAttributes"] = attributes.md5_of(system)
    if settings.fifo:
        out.group, out.dedup = fifo_ids(settings, params, body)
    else:  # kept and shown; SQS groups and deduplicates FIFO queues' messages only
        out.shown_group = _printable("MessageGroupId", params.get("MessageGroupId"))
        out.dedup = _printable("MessageDeduplicationId", params.get("MessageDeduplicationId"))
    return out


def fifo_ids(settings: QueueSettings, params: dict[str, Any], body: Any) -> tuple[str, str]:
    """A FIFO message's group and deduplication id (made from ``body`` under
    ContentBasedDeduplication); a batch refuses them all when one entry lacks them."""
    group = params.get("MessageGroupId")
    if group is None:
        raise missing_parameter("MessageGroupId")
    dedup = params.get("MessageDeduplicationId")
    if dedup is None and settings.content_dedup and isinstance(body, str):
        dedup = hashlib.sha256(body.encode("utf-8")).hexdigest()
    if dedup is None:
        raise invalid_parameter(
            "The queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId provided explicitly"
        )
    found = _printable("MessageGroupId", group), _printable("MessageDeduplicationId", dedup)
    return str(found[0]), str(found[1])


def _printable(name: str, value: Any) -> str | None:
    if value is not None and (
        not isinstance(value, str) or not re.fullmatch(r"[!-~]{1,128}", value)
    ):
        raise invalid_parameter(
            f"Value {value} for parameter {name} is invalid. Reason: "
            "1-128 printable ASCII characters."
        )
    return value


def _put(call: Call, name: str, settings: QueueSettings, batch: list[Outgoing]) -> None:
    """Enqueue ``batch`` (one transaction; a FIFO message with its deduplication id, whose
    duplicate within the window is answered as the first and not stored)."""
    ttl = float(settings.number("MessageRetentionPeriod"))
    if not settings.fifo:
        with call.db.transaction() as tx:
            # Entries alike (the same delay and sqs property: no attributes, say) go in one
            # enqueue_many, as the HTTP API's batches do; runs of them keep the batch's order.
            for (delay, sqs), run in itertools.groupby(
                batch, key=lambda out: (out.delay, out.sqs(call.who.name, None))
            ):
                outs = list(run)
                ids = tx.enqueue_many(
                    name,
                    [out.body for out in outs],
                    delay=float(delay),
                    properties={"sqs": sqs},
                    content_type=TEXT,
                    ttl=ttl,
                )
                for out, made_id in zip(outs, ids, strict=True):
                    out.answer["MessageId"] = message_id(made_id)
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
                    delay=float(out.delay),
                    properties={"sqs": out.sqs(call.who.name, sequence)},
                    content_type=TEXT,
                    ttl=ttl,
                )
                answer = {"MessageId": message_id(made), "SequenceNumber": sequence}
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


def send_message_batch(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = call.queue_of(params, "produce")
    entries = batches.entries(params, "SendMessageBatch")
    settings = call.settings(name)
    total = sum(len(str(e.get("MessageBody", "")).encode("utf-8")) for e in entries)
    if total > settings.number("MaximumMessageSize"):
        raise SqsError(
            "AWS.SimpleQueueService.BatchRequestTooLong",
            f"Batch requests cannot be longer than "
            f"{settings.number('MaximumMessageSize')} bytes. "
            f"You have sent {total} bytes.",
        )
    if settings.fifo:
        for entry in entries:
            fifo_ids(settings, entry, entry.get("MessageBody"))
    good: list[tuple[str, Outgoing]] = []
    failed: list[dict[str, Any]] = []
    for entry in entries:
        try:
            good.append((entry["Id"], _outgoing(call, settings, entry)))
        except SqsError as exc:
            failed.append(batches.failed(entry["Id"], exc))
    _put(call, name, settings, [out for _, out in good])
    out: dict[str, Any] = {"Successful": [{"Id": i, **o.answer} for i, o in good]}
    if failed:
        out["Failed"] = failed
    return out


async def receive_message(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name, settings = await call.offload(_consumed, call, params)
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
    taken: list[AsyncMessage] = []
    messages = []
    try:
        # What is ready, in one hop to the offload threads (sqs/held.py); then, if that
        # was short, what leases that ran out still hold (a visibility timeout over is
        # over for this receive, whenever the reaper's thread gets to it); if nothing
        # came and the receive may wait, the first to come through sluice.aio (no
        # thread held while waiting), then what is ready behind it.
        taken += await held.take(call.db, call.offload, call.acks, name, most)
        if len(taken) < most and await call.leases.give_back_due(name):
            taken += await held.take(call.db, call.offload, call.acks, name, most - len(taken))
        if not taken and wait > 0:
            first = await (await (await call.aio.get()).queue(name)).get(wait=float(wait))
            if first is not None:
                taken.append(first)
                if most > 1:
                    taken += await held.take(call.db, call.offload, call.acks, name, most - 1)
    finally:  # what was taken is leased even if the rest failed, as SQS would hold it
        for m in taken:
            lease = call.leases.add(m, float(seconds))
            call.state.remember(call.state.issued, lease.token, None)
            messages.append(_received(call, lease, system, wanted))
    if messages and seconds == 0:  # visible again at once: back now, not by the reaper
        await call.leases.give_back_due(name)
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
        "MessageId": message_id(m.id),
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
        ("group", "MessageGroupId"),
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


OPERATIONS = {"SendMessage": send_message, "SendMessageBatch": send_message_batch}
"""The message operations run in a thread (they commit)."""

ASYNC_OPERATIONS = {"ReceiveMessage": receive_message}
"""The message operations run on the event loop (sluice.aio: a long poll holds no thread)."""
