"""SQS's errors: every refusal of the endpoint is an ``SqsError`` with the code SQS gives
it, answered in the request's protocol (protocol.py): JSON's ``__type`` (the error's
shape in SQS's service model) with the ``x-amzn-query-error`` header (the query
protocol's code, which SDKs report), or the query protocol's XML ``ErrorResponse``."""

from __future__ import annotations

__all__ = [
    "SHAPES",
    "SqsError",
    "access_denied",
    "integer",
    "invalid_parameter",
    "missing_parameter",
    "no_queue",
    "unsupported",
]

SHAPES = {
    "AWS.SimpleQueueService.NonExistentQueue": "QueueDoesNotExist",
    "QueueAlreadyExists": "QueueNameExists",
    "AWS.SimpleQueueService.QueueDeletedRecently": "QueueDeletedRecently",
    "AWS.SimpleQueueService.PurgeQueueInProgress": "PurgeQueueInProgress",
    "AWS.SimpleQueueService.MessageNotInflight": "MessageNotInflight",
    "AWS.SimpleQueueService.EmptyBatchRequest": "EmptyBatchRequest",
    "AWS.SimpleQueueService.BatchEntryIdsNotDistinct": "BatchEntryIdsNotDistinct",
    "AWS.SimpleQueueService.TooManyEntriesInBatchRequest": "TooManyEntriesInBatchRequest",
    "AWS.SimpleQueueService.InvalidBatchEntryId": "InvalidBatchEntryId",
    "AWS.SimpleQueueService.BatchRequestTooLong": "BatchRequestTooLong",
    "AWS.SimpleQueueService.UnsupportedOperation": "UnsupportedOperation",
}
"""Query codes whose JSON shape has another name (the others are named as their code)."""


class SqsError(Exception):
    """A refusal: SQS's ``code``, a ``message`` for the user, the HTTP ``status``;
    ``sender``: the client's fault (else the server's)."""

    def __init__(self, code: str, message: str, status: int = 400, *, sender: bool = True):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.sender = sender

    @property
    def shape(self) -> str:
        """The error's name in the JSON protocol's ``__type``."""
        return SHAPES.get(self.code, self.code)


def no_queue() -> SqsError:
    return SqsError(
        "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist."
    )


def invalid_parameter(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing_parameter(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")


def access_denied(who: str, action: str, queue: str) -> SqsError:
    return SqsError(
        "AccessDenied",
        f"the key {who!r} has no grant to {action} on queue {queue!r} "
        "(sluice keys add NAME --grant 'PATTERN:ACTIONS')",
        403,
    )


def unsupported(operation: str, why: str) -> SqsError:
    return SqsError(
        "AWS.SimpleQueueService.UnsupportedOperation",
        f"{operation} is not supported by sluice's SQS endpoint: {why} (docs/sqs.md)",
    )


def integer(
    params: dict[str, object], key: str, default: int, low: int, high: int, *, why: str = ""
) -> int:
    """``params[key]`` as an integer within ``low`` to ``high`` (a number, or a string of
    digits as the query protocol sends it); InvalidParameterValue (``why``, with the value
    at its ``{}``) if it is not one."""
    value = params.get(key, default)
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 13:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid_parameter(
            why.format(value)
            if why
            else f"Value {value} for parameter {key} is invalid. Reason: must be between "
            f"{low} and {high}, if provided."
        )
    return value
