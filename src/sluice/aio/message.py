"""A message taken through ``sluice.aio``: the same fields, settled with ``await``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar, overload

from sluice.message import Body, Message, MessageState, Position, Settles, settled_by

__all__ = ["AsyncHolder", "AsyncMessage"]

T = TypeVar("T")


class AsyncHolder(Settles, Protocol):
    """The async transaction that took a message (``AsyncTransaction``): what
    ``settled_by`` asks of any holder, and an async commit."""

    async def commit(self) -> None: ...

    async def release(self, message: AsyncMessage) -> None: ...

    async def reject(self, message: AsyncMessage, reason: str) -> None: ...


class _Field(Generic[T]):
    """A field of the wrapped ``Message``, read through."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Field[T]: ...

    @overload
    def __get__(self, obj: AsyncMessage, owner: type) -> T: ...

    def __get__(self, obj: AsyncMessage | None, owner: type) -> _Field[T] | T:
        if obj is None:
            return self
        value: T = getattr(obj.message, self._name)
        return value


class AsyncMessage:
    """A ``sluice.Message`` (``.message``) with its fields, whose ``ack``, ``release`` and
    ``reject`` are awaited. Equal to another when their messages are."""

    __slots__ = ("_holder", "message")

    id = _Field[str]()
    queue = _Field[str]()
    body = _Field[Body]()
    content_type = _Field[str]()
    priority = _Field[int]()
    properties = _Field[dict[str, Any]]()
    correlation_id = _Field[str | None]()
    reply_to = _Field[str | None]()
    enqueued = _Field[float]()
    available = _Field[float]()
    expires = _Field[float | None]()
    attempts = _Field[int]()
    state = _Field[MessageState]()
    error = _Field[str | None]()
    origin_queue = _Field[str | None]()
    type = _Field[str | None]()
    group = _Field[str | None]()
    ref = _Field[int]()
    enqueued_at = _Field[datetime]()
    available_at = _Field[datetime]()
    expires_at = _Field[datetime | None]()
    position = _Field[Position]()
    producer = _Field[tuple[int, int]]()

    def __init__(self, message: Message, holder: AsyncHolder | None) -> None:
        self.message = message
        self._holder = holder

    def __repr__(self) -> str:
        return repr(self.message).replace("Message(", "AsyncMessage(", 1)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AsyncMessage):
            return self.message == other.message
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.message.id)

    @property
    def holder(self) -> AsyncHolder | None:
        """The transaction holding the message; None for a browsed one."""
        return self._holder

    async def ack(self) -> None:
        """Acknowledge a message taken with ``queue.get``: it is done and removed."""
        await self._own_transaction().commit()

    async def release(self) -> None:
        """Give a message taken with ``queue.get`` back to its original place."""
        tx = self._own_transaction()
        await tx.release(self)
        await tx.commit()

    async def reject(self, reason: str) -> None:
        """Send a message taken with ``queue.get`` to the error queue with a reason."""
        tx = self._own_transaction()
        await tx.reject(self, reason)
        await tx.commit()

    def _own_transaction(self) -> AsyncHolder:
        return settled_by(self.id, self._holder)  # the same checks, and words, as Message's
