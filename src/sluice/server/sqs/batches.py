"""SQS's batch requests (SendMessageBatch, DeleteMessageBatch,
ChangeMessageVisibilityBatch): the checks of their entries, which refuse the whole
request, and the failure entry of one that failed alone."""

from __future__ import annotations

import re
from typing import Any

from sluice.server.sqs.errors import SqsError, invalid_parameter, missing_parameter

__all__ = ["MAX_BATCH", "entries", "failed"]

MAX_BATCH = 10
"""The most entries a batch request may carry (SQS's limit)."""

_ENTRY_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


def entries(params: dict[str, Any], what: str) -> list[dict[str, Any]]:
    """The request's ``Entries``, checked as SQS checks them: present, 1 to 10, their
    ids distinct and of letters, digits, - and _ (at most 80)."""
    given = params.get("Entries")
    if given is None:
        raise missing_parameter("Entries")
    if not isinstance(given, list) or not all(isinstance(e, dict) for e in given):
        raise invalid_parameter("Entries must be a list of entries")
    if not given:
        raise SqsError(
            "AWS.SimpleQueueService.EmptyBatchRequest",
            f"There should be at least one {what}RequestEntry in the request.",
        )
    if len(given) > MAX_BATCH:
        raise SqsError(
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(given)}.",
        )
    seen: set[str] = set()
    for entry in given:  # the first repeated id is reported, before any malformed one
        ident = entry.get("Id")
        if isinstance(ident, str) and ident in seen:
            raise SqsError(
                "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", f"Id {ident} repeated."
            )
        if isinstance(ident, str):
            seen.add(ident)
    for entry in given:
        ident = entry.get("Id")
        if not isinstance(ident, str) or not _ENTRY_ID.match(ident):
            raise SqsError(
                "AWS.SimpleQueueService.InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, "
                "hyphens and underscores. It can be at most 80 letters long.",
            )
    return given


def failed(ident: str, error: SqsError) -> dict[str, Any]:
    """The ``Failed`` entry of the entry ``ident``, refused with ``error``."""
    return {"Id": ident, "SenderFault": error.sender, "Code": error.code, "Message": error.message}
