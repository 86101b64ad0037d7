"""What a receipt handle does: DeleteMessage(Batch) and ChangeMessageVisibility(Batch).

A receipt handle is the token of the lease its receive made (server/leases.py): while
the lease lives, deleting acknowledges the message and a visibility change extends or
ends the lease. A handle whose message was deleted deletes it again without error, as
SQS's does (a retried DeleteMessage whose answer was lost succeeds). A handle whose
visibility timeout ended is stale: its message went back to its place, maybe received
again by somebody else, and the handle neither deletes nor changes it
(``ReceiptHandleIsInvalid``), so a consumer that was too slow cannot settle a message
another one now holds (docs/sqs.md, differences)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from sluice.server.leases import MAX_LEASE, Lease
from sluice.server.problems import Problem
from sluice.server.sqs import batches
from sluice.server.sqs.context import Call
from sluice.server.sqs.errors import SqsError, integer, invalid_parameter, missing_parameter

__all__ = ["ASYNC_OPERATIONS"]

_STALE = (
    'The input receipt handle "{}" is not a valid receipt handle: its visibility timeout '
    "ended and its message went back to the queue (receive it again for a new handle)"
)


def _invalid(handle: Any, *, batch: bool) -> SqsError:
    # SQS's own texts: the batch operations name the handle, the single ones do not.
    text = (
        f'The input receipt handle "{handle}" is not a valid receipt handle.'
        if batch
        else "The input receipt handle is invalid."
    )
    return SqsError("ReceiptHandleIsInvalid", text)


def _lease(call: Call, name: str, handle: Any, *, batch: bool) -> Lease | None:
    """The live lease of ``handle``; None if its message was deleted already."""
    if handle is None:
        raise missing_parameter("ReceiptHandle")
    if not isinstance(handle, str) or not handle:
        raise _invalid(handle, batch=batch)
    try:
        lease = call.leases.peek(handle)
    except Problem:
        with call.state.lock:
            deleted = call.state.deleted.get(handle)
        if deleted == name:
            return None
        if handle in call.state.issued:
            raise SqsError("ReceiptHandleIsInvalid", _STALE.format(handle)) from None
        raise _invalid(handle, batch=batch) from None
    if lease.message.queue != name:
        raise _invalid(handle, batch=batch)
    return lease


async def _delete(call: Call, name: str, handle: Any, *, batch: bool) -> None:
    lease = _lease(call, name, handle, batch=batch)
    if lease is None:
        return
    call.leases.take(lease.token)
    await lease.message.ack()
    call.state.remember(call.state.deleted, lease.token, name)


async def _change(
    call: Call, name: str, handle: Any, params: dict[str, Any], *, batch: bool
) -> None:
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
    lease = _lease(call, name, handle, batch=batch)
    if lease is None:
        raise SqsError(
            "AWS.SimpleQueueService.MessageNotInflight",
            "The message referred to is not in flight: it was deleted.",
        )
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
    name = await call.offload(call.queue_of, params, "consume")
    await _delete(call, name, params.get("ReceiptHandle"), batch=False)
    return {}


async def change_message_visibility(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = await call.offload(call.queue_of, params, "consume")
    await _change(call, name, params.get("ReceiptHandle"), params, batch=False)
    return {}


async def _batch(
    params: dict[str, Any],
    what: str,
    each: Callable[[dict[str, Any]], Awaitable[None]],
    *,
    together: bool = False,
) -> dict[str, Any]:
    """Each entry's outcome, in the entries' order. ``together``: the entries run at once
    (each settle is a commit of its own, made in the offload threads for what a receive
    took there, sqs/held.py: concurrent commits share their flush to disk through group
    commit), but an entry repeating an earlier entry's receipt handle runs after them, so
    that it finds the message deleted, not its lease being taken."""
    entries = batches.entries(params, what)
    outcomes: list[BaseException | None] = [None] * len(entries)

    async def run(i: int) -> None:
        try:
            await each(entries[i])
        except SqsError as exc:
            outcomes[i] = exc

    first: list[int] = []
    repeated: list[int] = []
    handles: set[str] = set()
    for i, entry in enumerate(entries):
        handle = entry.get("ReceiptHandle")
        key = handle if isinstance(handle, str) else None
        (repeated if not together or key in handles else first).append(i)
        if key is not None:
            handles.add(key)
    raised = await asyncio.gather(*(run(i) for i in first), return_exceptions=True)
    for exc in raised:
        if isinstance(exc, BaseException):  # not an SQS refusal: the request fails
            raise exc
    for i in repeated:
        await run(i)
    done = [{"Id": e["Id"]} for e, o in zip(entries, outcomes, strict=True) if o is None]
    out: dict[str, Any] = {"Successful": done}
    failed = [batches.failed(e["Id"], o) for e, o in zip(entries, outcomes, strict=True)
              if isinstance(o, SqsError)]  # fmt: skip
    if failed:
        out["Failed"] = failed
    return out


async def delete_message_batch(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = await call.offload(call.queue_of, params, "consume")

    async def each(entry: dict[str, Any]) -> None:
        await _delete(call, name, entry.get("ReceiptHandle"), batch=True)

    return await _batch(params, "DeleteMessageBatch", each, together=True)


async def change_message_visibility_batch(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    name = await call.offload(call.queue_of, params, "consume")

    async def each(entry: dict[str, Any]) -> None:
        await _change(call, name, entry.get("ReceiptHandle"), entry, batch=True)

    return await _batch(params, "ChangeMessageVisibilityBatch", each)


ASYNC_OPERATIONS = {
    "DeleteMessage": delete_message,
    "DeleteMessageBatch": delete_message_batch,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
}
"""The receipt handles' operations, run on the event loop (they settle leases)."""
