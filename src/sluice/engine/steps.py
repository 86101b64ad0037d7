"""A transaction's work as steps, so that one piece of logic runs blocking or awaited.

A step says what the work needs next: a ``TxStore`` method (``Call``), other work
on the synchronous backend or catalog (``Blocking``), or to wait for news
(``Wait``). ``run`` performs the steps in the calling thread (``Transaction``);
``sluice.aio`` awaits them, so both APIs share every decision the engine makes.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, NamedTuple, TypeVar

from sluice.backends.base import TxStore
from sluice.engine.wakeups import Token, Wakeups

__all__ = ["Blocking", "Call", "Step", "Steps", "Wait", "run"]

T = TypeVar("T")


class Call(NamedTuple):
    """Run the ``TxStore`` method ``method`` with these arguments; send back its result."""

    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class Blocking(NamedTuple):
    """Run ``work`` as it is (it uses the synchronous backend); awaited, in a worker thread."""

    work: Callable[[], Any]


class Wait(NamedTuple):
    """Wait for news of ``queues`` after ``token``, up to ``timeout`` seconds."""

    token: Token
    timeout: float
    queues: tuple[str, ...]
    limit: int
    plain: bool = False
    """The waiter will make a plain claim of ``limit`` when woken (``Wakeups.quiet``)."""


Step = Call | Blocking | Wait
Steps = Generator[Step, Any, T]


def run(steps: Steps[T], store: TxStore, wakeups: Wakeups) -> T:
    """Perform ``steps`` in this thread; what they return. Failures are raised into them."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(result) if error is None else steps.throw(error)
        except StopIteration as stop:
            value: T = stop.value
            return value
        result, error = None, None
        try:
            if isinstance(step, Call):
                result = getattr(store, step.method)(*step.args, **step.kwargs)
            elif isinstance(step, Blocking):
                result = step.work()
            else:
                wakeups.wait(step.token, step.timeout, step.queues, step.limit, plain=step.plain)
        except BaseException as exc:
            error = exc
