"""Taking the next message (or the next several) from whichever of several queues has
them.

A consumer of several queues (a kombu channel consuming Celery's task queues and
its remote-control queue, say) would otherwise poll each in turn, or block in one
queue's ``get(wait=...)`` while another fills. Here it looks at each once, then
waits for news of any of them, or for the earliest of their delayed messages to
come due: one wake-up, no polling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

from sluice.catalog import QueueSpec
from sluice.engine import steps
from sluice.engine.enqueue import check_seconds
from sluice.engine.transaction import Transaction
from sluice.errors import ConfigurationError, SluiceError
from sluice.message import Message

if TYPE_CHECKING:
    from sluice.engine.context import EngineContext

__all__ = ["get_any", "get_many"]


def get_any(
    context: EngineContext,
    queues: Sequence[str],
    wait: float,
    until: threading.Event | None = None,
) -> Message | None:
    """The next message of the first of ``queues``, in the order given, that has one;
    waiting up to ``wait`` seconds for one if none has, or until ``until`` is set (news
    for the queues sets it too). None if none came."""
    taken = get_many(context, queues, wait, until, limit=1)
    return taken[0] if taken else None


def get_many(
    context: EngineContext,
    queues: Sequence[str],
    wait: float,
    until: threading.Event | None = None,
    *,
    limit: int,
) -> list[Message]:
    """Up to ``limit`` messages, from the first of ``queues`` that has some, then the
    next; each held on its own, settled by its own ``ack``, ``release`` or ``reject``.
    Waits as ``get_any`` for the first. A plain queue's are claimed at once, one of
    each group at most; a subscription's or an isolated queue's one at a time."""
    if isinstance(queues, str) or not queues:
        raise ConfigurationError("queues= takes a non-empty list of queue names")
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ConfigurationError(f"limit must be a positive integer, not {limit!r}")
    wait = check_seconds("wait", wait, allow_zero=True)
    specs = [context.spec(name) for name in queues]  # QueueNotFound before any wait
    # A subscription is woken by its topic's news too.
    news = sorted({s.name for s in specs} | {s.topic for s in specs if s.topic is not None})
    wakeups, clock = context.wakeups, context.clock
    deadline = time.monotonic() + wait
    token: tuple[int, int] | None = None  # the first look needs none: a busy queue's only
    while True:
        taken: list[Message] = []
        for spec in specs:
            taken += _take(context, spec, limit - len(taken))
            if len(taken) == limit:
                break
        remaining = deadline - time.monotonic()
        if taken or remaining <= 0 or (until is not None and until.is_set()):
            return taken
        if token is None:
            # Taken before a look, which then runs again: a commit after it (here or in
            # another process) ends the wait at once instead of being missed.
            token = wakeups.token()
            continue
        for spec in specs:
            due = context.backend.next_due(spec.name)
            if due is not None:
                remaining = min(remaining, clock.real_seconds(max(due - clock.now(), 0.0)))
        wakeups.wait(token, remaining, news, event=until)
        token = wakeups.token()


def _take(context: EngineContext, spec: QueueSpec, limit: int) -> list[Message]:
    """Up to ``limit`` of the queue's messages, each in an implicit transaction of its own."""
    if limit > 1 and spec.kind == "queue" and spec.isolation == "none":
        # One claim for them all; no lane chained (a group's next message waits for
        # its head's settle, as it would for another taker's).
        tx = Transaction(context, implicit=True)
        with _undone_on_error(tx):
            taken = steps.run(
                tx.dequeue_steps(spec.name, limit=limit, wait=0.0, where=None, order_by=None,
                                 chain=False),
                context.backend,
                context.wakeups,
            )  # fmt: skip
            parts = tx.split(taken) if taken else []
            if not tx.closed:
                tx.commit()  # what its model refused goes to the error queue; else nothing
        return parts
    messages: list[Message] = []
    while len(messages) < limit:
        tx = Transaction(context, implicit=True)
        with _undone_on_error(tx):
            one = tx.dequeue(spec.name, limit=1)
            if not one:
                tx.commit()
                break
        messages += one
    return messages


@contextmanager
def _undone_on_error(tx: Transaction) -> Iterator[None]:
    """A take that failed (its connection lost mid-claim, say) gives back what it may
    have claimed, rather than leaving it held until the session ends."""
    try:
        yield
    except BaseException:
        if not tx.closed:
            with suppress(SluiceError):
                tx.abort()
        raise
