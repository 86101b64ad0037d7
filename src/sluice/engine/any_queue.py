"""Taking the next message from whichever of several queues has one.

A consumer of several queues (a kombu channel consuming Celery's task queues and
its remote-control queue, say) would otherwise poll each in turn, or block in one
queue's ``get(wait=...)`` while another fills. Here it looks at each once, then
waits for news of any of them, or for the earliest of their delayed messages to
come due: one wake-up, no polling.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sluice.engine.enqueue import check_seconds
from sluice.engine.transaction import Transaction
from sluice.errors import ConfigurationError
from sluice.message import Message

if TYPE_CHECKING:
    from sluice.engine.context import EngineContext

__all__ = ["get_any"]


def get_any(context: EngineContext, queues: Sequence[str], wait: float) -> Message | None:
    """The next message of the first of ``queues``, in the order given, that has one;
    waiting up to ``wait`` seconds for one if none has. None if none came."""
    if isinstance(queues, str) or not queues:
        raise ConfigurationError("queues= takes a non-empty list of queue names")
    wait = check_seconds("wait", wait, allow_zero=True)
    specs = [context.spec(name) for name in queues]  # QueueNotFound before any wait
    # A subscription is woken by its topic's news too.
    news = sorted({s.name for s in specs} | {s.topic for s in specs if s.topic is not None})
    wakeups, clock = context.wakeups, context.clock
    deadline = time.monotonic() + wait
    while True:
        # Taken before the looks: a commit after them (here or in another process)
        # ends the wait at once instead of being missed.
        token = wakeups.token() if wait else (0, 0)
        for spec in specs:
            tx = Transaction(context, implicit=True)
            taken = tx.dequeue(spec.name, limit=1)
            if taken:
                return taken[0]
            tx.commit()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        for spec in specs:
            due = context.backend.next_due(spec.name)
            if due is not None:
                remaining = min(remaining, clock.real_seconds(max(due - clock.now(), 0.0)))
        wakeups.wait(token, remaining, news)
