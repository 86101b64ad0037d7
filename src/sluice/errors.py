"""The exceptions sluice raises: one root, a small tree, and a message that says what to do.

Each exception's docstring is its default message. Driver errors (``sqlite3.Error``,
later ``psycopg.Error``) are translated once, at the backend boundary, with
``raise ... from exc`` so the cause stays visible.

::

    SluiceError
    ├── ConfigurationError          bad URL, option or setting
    │   ├── MissingDependency       an optional part used without its extra installed
    │   ├── ExpressionError         an expression that does not parse or is not allowed
    │   ├── RuleDefinitionError     a rules definition (sluice.rules) with a mistake, at a line
    │   └── TypeDefinitionError     a message type that cannot be defined as given
    ├── StorageError                the database failed or cannot be used
    │   ├── ConnectionLost          the connection failed mid-statement: outcome unknown
    │   ├── NotASluiceDatabase      the file exists but is not a sluice database
    │   ├── SchemaTooNew            the database was written by a newer sluice
    │   └── SchemaTooOld            an older schema, not upgraded (migrate=false)
    ├── QueueError
    │   ├── QueueNotFound
    │   ├── QueueExists
    │   └── QueueInUse              dropping a queue that others still reference
    ├── MessageError
    │   ├── InvalidBody             a body that cannot be stored
    │   ├── PayloadTooLarge
    │   ├── TypeViolation           a body that does not conform to its message type
    │   └── MessageStateError       ack twice, release a message not held, ...
    ├── TransactionError
    │   ├── TransactionClosed       using a committed or aborted transaction
    │   ├── LeaseLost               the owner was taken for dead and rolled back
    │   ├── IncompleteBlock         a blockwise commit holding part of a block
    │   └── Conflict                another transaction changed what a commit depended on
    ├── JobError
    │   ├── JobNotFound
    │   ├── UnknownTaskType         a task type nobody defined or registered
    │   └── TaskTimeout             raised inside a task that ran past its timeout
    ├── KeyNotFound                 an API key of the server that nobody added
    └── GatewayError                a gateway queue (sluice.gateways) that cannot work
        ├── DeliveryFailed          a message a transport could not deliver, and why
        └── DropboxError            a dropbox directory that cannot be used (sluice.dropbox)
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "ConfigurationError",
    "Conflict",
    "ConnectionLost",
    "DeliveryFailed",
    "DropboxError",
    "ExpressionError",
    "GatewayError",
    "IncompleteBlock",
    "InvalidBody",
    "JobError",
    "JobNotFound",
    "KeyNotFound",
    "LeaseLost",
    "MessageError",
    "MessageStateError",
    "MissingDependency",
    "NotASluiceDatabase",
    "PayloadTooLarge",
    "QueueError",
    "QueueExists",
    "QueueInUse",
    "QueueNotFound",
    "RuleDefinitionError",
    "SchemaTooNew",
    "SchemaTooOld",
    "SluiceError",
    "StorageError",
    "TaskTimeout",
    "TransactionClosed",
    "TransactionError",
    "TypeDefinitionError",
    "TypeViolation",
    "UnknownTaskType",
]


class SluiceError(Exception):
    """A sluice operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigurationError(SluiceError):
    """A URL, option or setting is not valid; check the value against the documentation."""


class MissingDependency(ConfigurationError):
    """An optional part of sluice is used without its extra; install the extra it names."""


class ExpressionError(ConfigurationError):
    """The expression does not parse, or uses something outside the expression language."""

    expression: str | None
    """The expression as given; None when the mistake is not in its text."""
    position: int | None
    """Where in ``expression`` the mistake is, a 0-based character offset; None when it
    is in the expression as a whole."""
    line: int | None
    """``position``'s line in ``expression``, from 1."""
    column: int | None
    """``position``'s column on that line, from 1."""
    reason: str
    """What is wrong and what to do, without where: the message's first line."""
    expected: tuple[str, ...]
    """What is allowed at ``position``, the nearest first (a function's or a name's
    spelling, the token that was missing); empty when nothing in particular."""

    def __init__(
        self,
        message: str | None = None,
        *,
        expression: str | None = None,
        position: int | None = None,
        reason: str | None = None,
        expected: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.expression, self.position, self.expected = expression, position, expected
        self.reason = reason or str(self)
        self.line = self.column = None
        if expression is not None and position is not None:
            before = expression[:position]
            self.line = before.count("\n") + 1
            self.column = position - (before.rfind("\n") + 1) + 1


class RuleDefinitionError(ConfigurationError):
    """The rules definition has a mistake; fix the statement the message points at."""

    line: int | None
    """The line of the definition text the mistake is on; None when no line applies."""

    def __init__(self, message: str | None = None, *, line: int | None = None) -> None:
        self.line = line
        if message is not None and line is not None:
            message = f"line {line}: {message}"
        super().__init__(message)


class TypeDefinitionError(ConfigurationError):
    """The message type cannot be defined as given."""


class StorageError(SluiceError):
    """The database could not carry out the operation; nothing was changed."""


class ConnectionLost(StorageError):
    """The connection to the database failed: the outcome of the statement is unknown.

    Raised where a server connection (PostgreSQL) broke mid-statement or mid-commit: a
    commit may or may not have happened, so a producer that must not write twice
    resends with the same key (an Idempotency-Key, a dropbox file's name) or checks."""


class NotASluiceDatabase(StorageError):
    """The file is not a sluice database; point sluice at a new file or an existing sluice one."""


class SchemaTooNew(StorageError):
    """The database was written by a newer sluice; upgrade sluice before opening it."""


class SchemaTooOld(StorageError):
    """The database's schema is older than this sluice; run `sluice db upgrade` first."""


class QueueError(SluiceError):
    """A queue operation failed."""


class QueueNotFound(QueueError):
    """The queue does not exist; create it with db.create_queue(name) first."""

    def __init__(
        self,
        message: str | None = None,
        *,
        name: str | None = None,
        kind: str = "queue",
        suggestions: Sequence[str] = (),
        hint: str | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        """What was looked for: ``queue``, ``topic`` or ``subscription``."""
        self.suggestions = tuple(suggestions)
        """Existing names close to ``name``, nearest first: the "did you mean"."""
        super().__init__(message if message is not None or name is None else self.describe(hint))

    def describe(self, hint: str | None = None) -> str:
        """The message with ``hint``, the reader's own way to create it (a CLI command, a route).

        Each interface renders the same error in its own words: the Python API says
        ``db.create_queue``, the CLI ``sluice create``, the HTTP API its route.
        """
        if self.name is None:
            return str(self)
        text = f"{self.kind} {self.name!r} does not exist"
        if self.suggestions:
            text += f" (did you mean {' or '.join(map(repr, self.suggestions))}?)"
        return f"{text}; {hint}" if hint else text


class QueueExists(QueueError):
    """A queue of that name exists already; use db.queue(name) or pick another name."""


class QueueInUse(QueueError):
    """The queue is still referenced; remove the reference before dropping it."""


class MessageError(SluiceError):
    """A message could not be enqueued or settled."""


class InvalidBody(MessageError):
    """The body cannot be stored; pass a JSON value, str or bytes."""


class PayloadTooLarge(MessageError):
    """The body is larger than the queue allows; send a reference to the data instead."""


class TypeViolation(MessageError):
    """The body does not conform to its message type; nothing was stored."""


class MessageStateError(MessageError):
    """The message is not in a state that allows this; it may be settled already."""


class TransactionError(SluiceError):
    """A queue transaction could not be carried out."""


class TransactionClosed(TransactionError):
    """The transaction has ended; begin a new one with db.begin() or db.transaction()."""


class LeaseLost(TransactionError):
    """The transaction's session lost its lease and was rolled back; redo the work in a new one."""


class IncompleteBlock(TransactionError):
    """The transaction holds part of a writer's block on a blockwise queue; take the rest
    of the block and commit again, or abort. The transaction is still open."""


class Conflict(TransactionError):
    """Another transaction changed what this commit depended on; nothing was changed."""


class JobError(SluiceError):
    """A job or task operation failed."""


class JobNotFound(JobError):
    """No such job; it may have been cleaned up after its retention period."""


class UnknownTaskType(JobError):
    """The task type is not defined; define it with db.jobs.define or register it with
    @db.task first."""


class TaskTimeout(JobError):
    """The task ran past its timeout; its transaction is rolled back and it is retried."""


class KeyNotFound(SluiceError):
    """No API key of that name; list the keys with `sluice keys list`."""


class GatewayError(SluiceError):
    """A gateway queue cannot work as defined; see docs/gateways.md."""


class DeliveryFailed(GatewayError):
    """A gateway's transport could not deliver a message."""

    KINDS = ("disconnected", "refused", "timed out", "bad response")
    """Demaq's kinds of failure: the other side could not be reached, it said no, it did
    not answer in time, or it answered with an error or with what cannot be read."""

    def __init__(
        self, kind: str = "disconnected", detail: str | None = None, *, retry: bool = True
    ) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown delivery failure {kind!r}: one of {', '.join(self.KINDS)}")
        super().__init__(None if detail is None else f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.retry = retry
        """Whether trying again may succeed."""


class DropboxError(GatewayError):
    """A dropbox directory cannot be used as asked (a name that would leave its root, a
    link out of it, a full disk); the message says which file and what to do."""
