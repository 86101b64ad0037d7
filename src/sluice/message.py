"""Messages as consumers see them, and how bodies are encoded for storage."""

from __future__ import annotations

import json
import json.encoder
import json.scanner
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any, NamedTuple, Protocol, SupportsIndex, TypeAlias, TypeVar, overload

from sluice.errors import ConfigurationError, InvalidBody, MessageStateError, PayloadTooLarge

__all__ = [
    "JSON",
    "OCTETS",
    "TEXT",
    "XML",
    "Body",
    "Holder",
    "Message",
    "MessageState",
    "Position",
    "Settles",
    "StoredJSON",
    "decode_body",
    "decode_json",
    "encode_body",
    "encode_json",
    "is_json",
    "is_xml",
    "settled_by",
]

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
OCTETS = "application/octet-stream"

Body: TypeAlias = Any
"""A JSON value (dict, list, str, int, float, bool, None), a str of text, or bytes."""


class MessageState(IntEnum):
    """Where a message is in its life; stored as the integer."""

    PENDING = 0
    """Enqueued by a transaction that has not committed: seen only by that transaction."""
    READY = 1
    """Committed and waiting (possibly delayed until ``available_at``)."""
    CLAIMED = 2
    """Dequeued by a transaction that has not ended."""
    EXPIRED = 3
    """Past its time to live before anyone took it; kept for inspection."""
    FAILED = 4
    """Rejected or out of attempts with no error queue to go to; kept for inspection."""
    WAITING = 5
    """Committed, behind its lane's head (a group's, or an isolated queue's writer's or
    block's): ready to the lane's reader, and taken in lane order. Consumers see READY."""
    DONE = 6
    """Settled (acknowledged) in a queue that keeps its outcomes (``retention``)."""

    @classmethod
    def names(cls) -> dict[int, str]:
        """Each stored code's name as ``stats()`` counts it (a WAITING message is ready)."""
        return {s.value: "ready" if s is cls.WAITING else s.name.lower() for s in cls}


def _unserializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder and scanner behind json.dumps/json.loads, called directly: for the
# small bodies a queue carries, the Python wrappers around them cost more than the
# work itself. No cycle markers (they would be state shared between threads): a
# circular structure ends in RecursionError instead, which encode_body reports.
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_ENCODE: Callable[[Any, int], Iterable[str]]
if _C_ENCODER is not None:
    _ENCODE = _C_ENCODER(
        None, _unserializable, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
else:  # no C accelerator (not CPython): the json module's own, slower path
    _PY_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    _ENCODE = lambda value, _level: _PY_ENCODER.iterencode(value)  # noqa: E731
# typeshed types the argument as the scanner's context; it is the decoder that provides it.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type]
)


def encode_json(value: Any) -> str:
    """Compact JSON text; ValueError or TypeError for what JSON cannot hold."""
    if isinstance(value, str):
        return json.encoder.encode_basestring(value)
    try:
        return "".join(_ENCODE(value, 0))
    except RecursionError as exc:
        raise ValueError("the value is nested too deeply or refers to itself") from exc


def decode_json(text: str | bytes) -> Any:
    """json.loads, starting with the C scanner; anything unusual goes the long way.

    ValueError for what is not JSON, also for JSON nested too deeply to decode.
    """
    try:
        if isinstance(text, str):
            try:
                value, end = _SCAN(text, 0)
            except StopIteration:
                return json.loads(text)
            if end == len(text):
                return value
        return json.loads(text)
    except RecursionError as exc:
        # Text from outside ('[' * 100_000 in a file, a request, a reply) would otherwise
        # escape every caller's `except ValueError` as a RecursionError.
        raise ValueError("the JSON is nested too deeply to be decoded") from exc


XML = "application/xml"


def is_xml(content_type: str) -> bool:
    """application/xml, text/xml or a +xml type."""
    base = content_type.split(";", 1)[0].strip().lower()
    return base in ("application/xml", "text/xml") or base.endswith("+xml")


def is_json(content_type: str) -> bool:
    """application/json or a +json type."""
    return _is_json(content_type)


def _is_json(content_type: str) -> bool:
    if content_type == JSON:
        return True
    base = content_type.split(";", 1)[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


def encode_body(body: Body, content_type: str | None, max_size: int) -> tuple[str | bytes, str]:
    """Encode a body for storage and pick its content type.

    bytes are stored as given, str as UTF-8 text, anything else as compact JSON.
    Raises InvalidBody or PayloadTooLarge; nothing has been stored then.
    """
    stored: str | bytes
    if isinstance(body, bytes | bytearray | memoryview):
        stored = bytes(body)
        content_type = content_type or OCTETS
        size = len(stored)
    elif isinstance(body, str) and not (content_type and _is_json(content_type)):
        stored = body
        content_type = content_type or TEXT
        size = _utf8_size(body, max_size)
    else:
        try:
            stored = encode_json(body)
        except (TypeError, ValueError) as exc:
            raise InvalidBody(
                f"the body is not a JSON value ({exc}); pass JSON-compatible data, str or bytes"
            ) from exc
        content_type = content_type or JSON
        size = _utf8_size(stored, max_size)
    if size > max_size:
        raise PayloadTooLarge(
            f"the body is {size} bytes, over this queue's limit of {max_size} bytes; "
            "send a reference to the data, or raise the queue's max_size"
        )
    if isinstance(stored, bytes) and _is_json(content_type):
        _check_json_bytes(stored)
    return stored, content_type


def _check_json_bytes(data: bytes) -> None:
    # Bytes said to be JSON are stored as given and decoded by every read and selection:
    # ones that are not JSON (or hold what a JSON value given as such may not: NaN, an
    # infinity, a lone surrogate) failed each get() after being stored, a poison message.
    try:
        encode_json(decode_json(data.decode("utf-8"))).encode("utf-8")
    except ValueError as exc:  # UnicodeError and JSONDecodeError are ValueErrors
        raise InvalidBody(
            f"the bytes are not the UTF-8 JSON their content type says ({exc}); pass the "
            "JSON value itself, or bytes of another content type"
        ) from None


def lone_surrogate(text: str) -> int | None:
    """Where ``text`` has a lone surrogate, or None. One comes from '\\ud800' or from bytes
    decoded with surrogateescape; no UTF-8 holds it, so no database's driver takes it."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _utf8_size(text: str, max_size: int) -> int:
    if text.isascii():  # no lone surrogate, a byte a character: no encoding needed
        return len(text)
    # A character takes 1 to 4 bytes: only measure exactly when the bound is unclear.
    if len(text) * 4 <= max_size:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidBody(f"the text is not valid Unicode ({exc.reason})") from exc
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidBody(f"the text is not valid Unicode ({exc.reason})") from exc


def decode_body(stored: str | bytes | None, content_type: str) -> Body:
    """The inverse of encode_body."""
    if _is_json(content_type):
        return decode_json(stored) if stored is not None else None
    return stored


class Holder(Protocol):
    """What holds a taken message and settles it: the transaction that dequeued it.

    A message is given its holder when it is taken, so ``ack()`` and friends
    call back into the engine without this module knowing the engine.
    """

    @property
    def id(self) -> str: ...

    @property
    def implicit(self) -> bool:
        """The one-message transaction behind ``Queue.get``, settled by the message itself."""
        ...

    @property
    def closed(self) -> bool: ...

    def commit(self) -> None: ...

    def release(self, message: Message) -> None: ...

    def reject(self, message: Message, reason: str) -> None: ...


class Position(NamedTuple):
    """Where a message stands in its queue's delivery order: its priority, then its place.

    ``browse(after=position)`` pages on from it; ``str(position)`` ("priority:seq")
    round-trips through ``Position.parse``, for keeping it in a file or a URL.
    """

    priority: int
    seq: int

    def __str__(self) -> str:
        return f"{self.priority}:{self.seq}"

    @classmethod
    def parse(cls, value: Position | str | tuple[int, int]) -> Position:
        """A Position from itself, its text ("priority:seq") or a (priority, seq) pair."""
        if isinstance(value, Position):
            return value
        try:
            if isinstance(value, str):
                text_priority, text_seq = value.split(":")
                found = cls(int(text_priority), int(text_seq))
            else:
                priority, seq = value
                if isinstance(priority, bool) or isinstance(seq, bool):
                    raise TypeError("a bool is not a position")
                found = cls(int(priority), int(seq))
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"{value!r} is not a position: use a message's .position or its text 'priority:seq'"
            ) from None
        if not all(-(2**63) <= part < 2**63 for part in found):
            # No message has one: the database stores both as 64-bit integers.
            raise ConfigurationError(f"{value!r} is not a position: it is beyond the 64-bit range")
        return found


class StoredJSON:
    """A JSON body as stored, decoded when first read (then kept).

    Dequeueing builds a Message for every message taken, and most consumers of a batch
    read a body once or not at all (a relay, a count, a filter on properties): decoding
    each at dequeue cost about a tenth of a batch's Python. The text was checked when it
    was enqueued, so reading it later fails only if something outside sluice wrote it.
    Two threads reading one message's body at once may each decode it: both get equal
    values, not the same object.
    """

    __slots__ = ("_text", "_value")

    def __init__(self, text: str | bytes) -> None:
        self._text: str | bytes | None = text
        self._value: Any = None

    def value(self) -> Any:
        """The decoded body (decoded once)."""
        text = self._text
        if text is not None:
            self._value = decode_json(text)
            self._text = None
        return self._value

    def __eq__(self, other: object) -> bool:
        return bool(self.value() == (other.value() if isinstance(other, StoredJSON) else other))

    def __hash__(self) -> int:
        return hash(self.value())

    def __repr__(self) -> str:
        try:
            return repr(self.value())
        except ValueError:  # printing a message must not fail on its body
            return f"<stored body, not JSON: {self._text!r:.80}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return _decoded, (self.value(),)


def _decoded(value: Any) -> Any:
    """What a pickled StoredJSON comes back as: its value."""
    return value


class _MessageFields(NamedTuple):
    """Message's fields, in the order a Message is built from (``body``: a StoredJSON
    where it is not decoded yet; Message.body decodes it)."""

    id: str
    queue: str
    body: Body
    content_type: str
    priority: int
    properties: dict[str, Any]
    correlation_id: str | None
    reply_to: str | None
    enqueued: float
    """When it was enqueued, in seconds since the epoch (``enqueued_at`` as a datetime)."""
    available: float
    """When it is or was due, in seconds since the epoch."""
    expires: float | None
    """When it expires, in seconds since the epoch; None if never."""
    attempts: int
    state: MessageState
    error: str | None = None
    origin_queue: str | None = None
    type: str | None = None
    """The message type it conforms to, if it was enqueued with one."""
    group: str | None = None
    """The group it was enqueued in: a group's messages are taken in order, by one
    transaction at a time (docs/isolation.md)."""
    ref: int = 0
    """The storage row; internal, valid while the message is held."""
    holder: Holder | None = None
    """The transaction holding the message; None for a browsed one."""


class Message(_MessageFields):
    """A message as read from a queue: an immutable value.

    ``id`` is ``S/T/M``: the producer session, its transaction and the message's
    number within it. A message obtained by ``Queue.get`` is settled with
    ``ack``, ``release`` or ``reject``; one obtained in an explicit transaction is
    settled by that transaction's commit or abort.

    (A named tuple rather than a frozen dataclass: it is built for every message
    dequeued, and a frozen dataclass's ``__init__`` costs seven times as much.)
    """

    __slots__ = ()

    @property
    def body(self) -> Body:
        """The body: a JSON value, text (str) or bytes. A JSON body is decoded when first
        read, not at dequeue."""
        stored = tuple.__getitem__(self, 2)
        if type(stored) is not StoredJSON:
            return stored
        try:
            return stored.value()
        except ValueError as exc:
            raise InvalidBody(
                f"message {self.id}'s stored body is not JSON ({exc}); sluice checks bodies "
                "when they are enqueued, so something outside it wrote this one. Reject the "
                "message to keep it for inspection"
            ) from None

    # By position too (m[2], unpacking, _replace, _asdict, pickling, copies), the body
    # is the decoded one: only .body above and these read the stored field.
    def __iter__(self) -> Iterator[Any]:
        for n, field in enumerate(tuple.__iter__(self)):
            yield field.value() if n == 2 and type(field) is StoredJSON else field

    @overload
    def __getitem__(self, index: SupportsIndex) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Any, ...]: ...
    def __getitem__(self, index: SupportsIndex | slice) -> Any:
        return tuple(self)[index]

    def __repr__(self) -> str:
        body = tuple.__getitem__(self, 2)  # a StoredJSON prints as its value, or its text
        return (
            f"Message(id={self.id!r}, queue={self.queue!r}, priority={self.priority}, "
            f"state={self.state.name}, attempts={self.attempts}, body={body!r})"
        )

    @property
    def enqueued_at(self) -> datetime:
        """When it was enqueued (UTC)."""
        return datetime.fromtimestamp(self.enqueued, tz=UTC)

    @property
    def available_at(self) -> datetime:
        """When it is or was due (UTC); later than ``enqueued_at`` for a delayed message."""
        return datetime.fromtimestamp(self.available, tz=UTC)

    @property
    def expires_at(self) -> datetime | None:
        """When it expires (UTC), or None."""
        return None if self.expires is None else datetime.fromtimestamp(self.expires, tz=UTC)

    @property
    def position(self) -> Position:
        """Its place in the queue's delivery order: ``browse(after=...)`` pages on from it."""
        return Position(self.priority, self.ref)

    @property
    def producer(self) -> tuple[int, int]:
        """The (session, transaction) that enqueued this message."""
        session, tx, _ = self.id.split("/")
        return int(session), int(tx)

    def ack(self) -> None:
        """Acknowledge a message taken with ``Queue.get``: it is done and removed."""
        self._own_transaction().commit()

    def release(self) -> None:
        """Give a message taken with ``Queue.get`` back to its original place."""
        tx = self._own_transaction()
        tx.release(self)
        tx.commit()

    def reject(self, reason: str) -> None:
        """Send a message taken with ``Queue.get`` to the error queue with a reason."""
        tx = self._own_transaction()
        tx.reject(self, reason)
        tx.commit()

    def _own_transaction(self) -> Holder:
        return settled_by(self.id, self.holder)


class Settles(Protocol):
    """What ``settled_by`` asks of a holder, sync (Holder) or async (sluice.aio's)."""

    @property
    def id(self) -> str: ...

    @property
    def implicit(self) -> bool: ...

    @property
    def closed(self) -> bool: ...


_H = TypeVar("_H", bound=Settles)


def settled_by(message_id: str, holder: _H | None) -> _H:
    """The transaction that settles message ``message_id`` by itself (``ack()`` and its
    kin): its own one-message transaction. MessageStateError for a browsed message, one
    taken in a transaction of the caller's, or one settled already."""
    if holder is None:
        raise MessageStateError(
            f"message {message_id} was browsed, not taken; only a taken message can be settled"
        )
    if not holder.implicit:
        raise MessageStateError(
            f"message {message_id} belongs to transaction {holder.id}; "
            "it is settled by that transaction's commit or abort"
        )
    if holder.closed:
        raise MessageStateError(f"message {message_id} has already been settled")
    return holder
