"""Queue transactions for asyncio: the engine's ``Transaction``, its IO awaited.

Every decision is the engine's own (``Transaction``'s steps, engine/steps.py);
this module awaits the steps' IO on the database's store and thread, and hands
out ``AsyncMessage``s. ``async with db.transaction() as tx`` commits on exit and
aborts on an exception, as ``with`` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Unpack

from sluice.aio.context import AsyncContext
from sluice.aio.message import AsyncMessage
from sluice.backends.base import Effect, Lane
from sluice.engine.enqueue import EnqueueOptions
from sluice.engine.reading import BrowseState
from sluice.engine.transaction import Transaction, TxState
from sluice.errors import SluiceError
from sluice.message import Body, Message, Position

__all__ = ["AsyncTransaction", "Mark"]

Mark = tuple[int, int, int, int, frozenset[Lane]]
"""What ``savepoint`` gives and ``rollback_to`` takes."""


class AsyncTransaction:
    """A queue transaction whose operations are awaited; see ``sluice.Transaction``.

    Meant for one task at a time. Its id is ``S/T``, as a blocking transaction's.
    """

    def __init__(self, context: AsyncContext, *, implicit: bool = False) -> None:
        self._context = context
        self._tx = Transaction(context.engine, implicit=implicit)

    def __repr__(self) -> str:
        return f"<AsyncTransaction {self.id} {self.state.value}>"

    @property
    def id(self) -> str:
        return self._tx.id

    @property
    def session(self) -> int:
        return self._tx.session

    @property
    def number(self) -> int:
        return self._tx.number

    @property
    def implicit(self) -> bool:
        """The one-message transaction behind ``queue.get``, settled by the message itself."""
        return self._tx.implicit

    @property
    def state(self) -> TxState:
        return self._tx.state

    @property
    def closed(self) -> bool:
        return self._tx.closed

    @property
    def next_message_id(self) -> str:
        """The id the next message this transaction enqueues will get."""
        return self._tx.next_message_id

    # --- enqueue ---------------------------------------------------------------------
    async def enqueue(self, queue: str, body: Body, **options: Unpack[EnqueueOptions]) -> str:
        """Add a message to ``queue`` when this transaction commits; returns its id."""
        (message_id,) = await self.enqueue_many(queue, [body], **options)
        return message_id

    async def enqueue_many(
        self, queue: str, bodies: Iterable[Body], **options: Unpack[EnqueueOptions]
    ) -> list[str]:
        """Add several messages with the same options; see ``Transaction.enqueue_many``."""
        await self._context.content(queue)
        return self._tx.enqueue_many(queue, bodies, **options)

    async def flush(self) -> None:
        """Write buffered enqueues to the database now, as pending; commit does it anyway."""
        await self._context.steps(self._tx.flush_steps())

    # --- dequeue ---------------------------------------------------------------------
    async def dequeue(
        self,
        queue: str,
        *,
        limit: int = 1,
        wait: float = 0.0,
        where: str | None = None,
        order_by: Sequence[str] | None = None,
    ) -> list[AsyncMessage]:
        """Take up to ``limit`` messages, waiting up to ``wait`` seconds for the first.

        As ``Transaction.dequeue``; the wait is the event loop's, no thread's.
        """
        await self._context.content(queue)
        steps = self._tx.dequeue_steps(
            queue, limit=limit, wait=wait, where=where, order_by=order_by
        )
        return [AsyncMessage(m, self) for m in await self._context.steps(steps)]

    async def release(self, message: AsyncMessage) -> None:
        """Give a taken message back now, to its original place (counts an attempt)."""
        await self._context.steps(self._tx.release_steps(self._own(message)))

    async def reject(self, message: AsyncMessage, reason: str) -> None:
        """Send a taken message to its queue's error queue with ``reason`` when this commits."""
        self._tx.reject(self._own(message), reason)

    async def browse(
        self,
        queue: str,
        *,
        limit: int = 100,
        state: BrowseState = "ready",
        where: str | None = None,
        order_by: Sequence[str] | None = None,
        after: Position | str | tuple[int, int] | None = None,
    ) -> list[AsyncMessage]:
        """Look at a queue as this transaction sees it, without taking anything."""
        steps = self._tx.browse_steps(
            queue, limit=limit, state=state, where=where, order_by=order_by, after=after
        )
        return [AsyncMessage(m, None) for m in await self._context.steps(steps)]

    def _own(self, message: AsyncMessage | Message) -> Message:
        # The engine checks that it holds the message (MessageStateError otherwise).
        return message.message if isinstance(message, AsyncMessage) else message

    # --- ending ----------------------------------------------------------------------
    async def commit(self) -> None:
        """Make every enqueue and dequeue of this transaction happen, at once and durably."""
        await self._context.steps(self._tx.commit_steps())

    async def abort(self) -> None:
        """Undo everything: enqueues vanish, taken messages return to their places."""
        await self._context.steps(self._tx.abort_steps())

    def savepoint(self) -> Mark:
        """A mark that ``rollback_to`` can undo this transaction's later enqueues to."""
        return self._tx.savepoint()

    def rollback_to(self, mark: Mark) -> None:
        """Undo the enqueues and effects added since ``mark``; see ``Transaction``."""
        self._tx.rollback_to(mark)

    def add_effect(self, effect: Effect) -> None:
        """Have a named jobs statement commit with this transaction."""
        self._tx.add_effect(effect)

    async def __aenter__(self) -> AsyncTransaction:
        self._tx.__enter__()  # TransactionClosed if it has ended
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # As Transaction.__exit__: one the block ended explicitly is left as it is.
        if self.state is not TxState.ACTIVE:
            return
        if exc_type is None:
            try:
                await self.commit()
            except BaseException:
                if self.state is TxState.ACTIVE:
                    with contextlib.suppress(SluiceError):
                        await self.abort()
                raise
        else:
            await self.abort()
