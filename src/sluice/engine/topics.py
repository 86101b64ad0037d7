"""Topics and subscriptions at the engine (docs/topics.md).

A topic is a destination: what is put into it goes to each of its subscriptions.
A subscription is consumed exactly as a queue of its name is; before a consumer
takes from it, ``before_take`` has the backend pull the topic's next messages into
it (sluice.backends.topics). sluice.engine.upkeep drops the subscriptions that
ended and collects what every subscription has passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from sluice.backends.base import MessageRow, Selection
from sluice.catalog import DEFAULT_WINDOW, QueueSpec
from sluice.errors import ConfigurationError, QueueNotFound
from sluice.message import Position

if TYPE_CHECKING:
    from sluice.engine.context import EngineContext

__all__ = [
    "Start",
    "Subscription",
    "before_take",
    "check_target",
    "pull_claim",
    "selector",
    "start_pointer",
    "taken",
]

Start = Literal["new", "first"] | int | Position
"""Where a new subscription starts: after the topic's last message (``new``), at its
first stored one (``first``), or after one of its messages (its ``position`` as
browsing the topic shows it, or that position's ``seq``)."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """A subscription and how far behind it is (``db.subscriptions()``)."""

    name: str
    topic: str
    where: str | None
    durable: bool
    expire_after: float | None
    position: int
    """The topic's last message it has taken or passed."""
    held: int
    """Messages taken from the topic and not yet settled (ready, delayed or held)."""
    backlog: int
    """Messages of the topic past its position that it will receive."""
    oldest: float | None
    """When the oldest message it has yet to settle was enqueued (None: it has none)."""
    last_used: float | None
    backlog_delayed: int = 0
    """Of ``backlog``, the messages not due yet: counted delayed, as Queue.stats does."""

    @property
    def lag(self) -> int:
        """Messages it has yet to settle: taken and unsettled, or still in the topic."""
        return self.held + self.backlog

    def lag_seconds(self, now: float) -> float:
        """How long its oldest unsettled message has waited, at ``now``."""
        return 0.0 if self.oldest is None else max(now - self.oldest, 0.0)


def selector(context: EngineContext, spec: QueueSpec) -> Selection | None:
    """A subscription's where, checked against its topic (None: every message)."""
    return context.subscription_selector(spec)


def before_take(
    context: EngineContext, spec: QueueSpec, *, everything: bool = False, force: bool = False
) -> bool:
    """What comes before taking from ``spec``'s queue: a topic refuses, a subscription pulls.

    A subscription asks the database only when this process reckons fewer than half
    its window ready (``context.ready_hints``, lowered by ``taken``), or when
    ``force``d (a claim came back short: others may have taken what it reckoned).
    ``everything``: pull the whole backlog, for a dequeue that selects or orders.
    True if it asked the database.
    """
    if spec.kind == "topic":
        raise ConfigurationError(
            f"{spec.name!r} is a topic: take its messages from a subscription "
            f"(db.subscribe({spec.name!r}, 'NAME'), then get from 'NAME')"
        )
    if spec.kind != "subscription":
        return False
    window = spec.window or DEFAULT_WINDOW
    if not (everything or force) and _enough(context, spec.name, window):
        return False
    with _gone(context, spec.name):
        ready = context.backend.pull(
            spec.name, selector(context, spec), window=window, everything=everything
        )
    context.ready_hints[spec.name] = ready
    return True


def pull_claim(
    context: EngineContext, spec: QueueSpec, *, session: int, tx: int, limit: int
) -> list[MessageRow] | None:
    """``before_take`` and a plain claim of up to ``limit`` of ``spec``'s messages in one
    call, where a pull is due and the backend merges the two (``Topics.pull_claim``):
    the claimed rows. None: nothing was done; the caller pulls and claims."""
    window = spec.window or DEFAULT_WINDOW
    if spec.kind != "subscription" or _enough(context, spec.name, window):
        return None
    with _gone(context, spec.name):
        done = context.backend.pull_claim(
            spec.name, selector(context, spec), window=window, session=session, tx=tx,
            limit=limit,
        )  # fmt: skip
    if done is None:
        return None
    context.ready_hints[spec.name], rows = done
    return rows


def _enough(context: EngineContext, name: str, window: int) -> bool:
    """This process reckons at least half of subscription ``name``'s window ready."""
    hint = context.ready_hints.get(name)
    return hint is not None and hint >= (window + 1) // 2


@contextmanager
def _gone(context: EngineContext, name: str) -> Iterator[None]:
    """A pull that finds its subscription gone: forgotten here, and said so plainly."""
    try:
        yield
    except QueueNotFound:
        context.forget(name)
        raise QueueNotFound(
            f"subscription {name!r} does not exist (it was unsubscribed, "
            "or dropped when it ended or expired)"
        ) from None


def taken(context: EngineContext, spec: QueueSpec, count: int) -> None:
    """This process took ``count`` of a subscription's ready messages."""
    hint = context.ready_hints.get(spec.name)
    if hint is not None:
        context.ready_hints[spec.name] = max(hint - count, 0)


def check_target(spec: QueueSpec) -> None:
    """Refuse enqueues into a subscription: it receives what its topic is given."""
    if spec.kind == "subscription":
        raise ConfigurationError(
            f"{spec.name!r} is a subscription of topic {spec.topic!r}: put messages into "
            "the topic, and every subscription gets them"
        )


def start_pointer(start: Start | Position) -> int | None:
    """The pointer a new subscription starts at (None: after the topic's last message)."""
    if isinstance(start, Position):  # a topic message's, as browsing the topic shows it
        return start.seq
    if start == "new":
        return None
    if start == "first":
        return 0
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ConfigurationError(
            f"start must be 'new', 'first' or a message position (an integer >= 0), not {start!r}"
        )
    return start
