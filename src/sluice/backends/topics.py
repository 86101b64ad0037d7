"""Topics and subscriptions in the SQL backends (docs/topics.md; the SQL in topics.sql).

A topic stores each message once. A subscription is a queue of its own with a
pointer into its topic: before its consumers claim, ``pull`` moves the topic's next
messages that the subscription's selector holds for into it, up to its window of
ready ones, and advances the pointer past every message it took or passed. From
there a subscription is an ordinary queue: claims, releases, rejects, error queue,
attempts, stats and wake-ups are the queue engine's own. ``collect`` deletes a
topic's messages once every subscription's pointer has passed them (and its
retention, if any, has run out), a bounded range at a time.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sluice.backends.records import Lane, MessageRow, Row, Selection
from sluice.clock import Clock
from sluice.errors import QueueNotFound
from sluice.expr.sql import Source, SqlCompiler
from sluice.sql import Template

__all__ = ["COLLECT_SPAN", "TOUCH_EVERY", "Backlog", "Refill", "SqlTopics"]

COLLECT_SPAN = 10_000
"""The most message ids one collection of a topic covers: a bounded delete."""

TOUCH_EVERY = 30.0
"""Seconds between a polling consumer's marks of its subscription as used, when it
finds nothing new (a pull that takes messages marks it anyway)."""


@dataclass(frozen=True, slots=True)
class Backlog:
    """What a subscription has yet to settle: taken (ready or held) and still in its topic."""

    held: int
    """Messages it has taken from its topic and not settled (ready, waiting or claimed)."""
    held_since: float | None
    """When the oldest of them was enqueued."""
    unpulled: int
    """Messages of its topic past its pointer that its selector holds for."""
    unpulled_since: float | None
    unpulled_delayed: int
    """Those of them not due yet (``delay``)."""


@dataclass(frozen=True, slots=True)
class Refill:
    """A pull's subject: the subscription (name, id), its topic, its window, whether to
    take everything past its pointer, and the time the pull is made at."""

    subscription: str
    sub_id: int
    topic_id: int
    window: int
    everything: bool
    now: float


class SqlTopics:
    """Topics for a SQL backend with the statements of topics.sql (a mixin)."""

    _q: dict[str, str]
    _templates: dict[str, Template]
    clock: Clock

    @abstractmethod
    def _transaction(self, *, durable: bool = True) -> AbstractContextManager[Any]: ...

    @abstractmethod
    def _read_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]: ...

    @abstractmethod
    def _write_rows(self, name: str, params: Mapping[str, Any], *, durable: bool = True) -> int: ...

    @abstractmethod
    def _promote(self, conn: Any, lanes: Sequence[Lane]) -> None: ...

    @abstractmethod
    def _compiler(self, source: Source, prefix: str) -> SqlCompiler:
        """A compiler of expressions into this dialect, over ``source``."""

    def _with_selector(self, name: str, selector: Selection | None) -> tuple[str, dict[str, Any]]:
        """The statement ``name`` with the subscription's selector over the topic's row m."""
        if selector is None or selector.where is None:
            return self._templates[name].fill(selector=""), {}
        sql = self._compiler(Source(alias="m", properties=selector.slots), "s")
        where = f" AND {sql.compile(selector.where)}"
        text = self._templates[name].fill(selector=where)
        self._q.setdefault(text, text)  # PostgreSQL runs statements by their text
        return text, sql.params

    # --- pulling ----------------------------------------------------------------------
    def pull(
        self, subscription: str, selector: Selection | None, *, window: int, everything: bool
    ) -> int:
        """Take the topic's next messages into ``subscription``; about how many it has ready.

        (The ready messages it had, counted up to half its window, plus those taken; 0
        when its topic had nothing past its pointer: then they were not counted, and the
        next take asks again.) Refills its ``window`` of ready messages once fewer than
        half are left, or takes ``everything`` past its pointer (a selective or ordering
        dequeue must see them all). ``selector``: the subscription's where, checked
        against its topic. QueueNotFound if it is gone.
        """
        rows = self._read_rows("subscription_state", {"name": subscription})
        if not rows:
            raise QueueNotFound(f"subscription {subscription!r} does not exist")
        sub_id, topic_id, _, _, pending, used_at, _ = rows[0]
        now = self.clock.now()
        # Counted only when there is something to pull: the count reads up to half a
        # window of rows, and most takes of a subscription that keeps up find nothing new.
        ready, pulled = 0, False
        if pending:
            ready, pulled = self._refill(
                Refill(subscription, sub_id, topic_id, window, everything, now), selector
            )
        if not pulled:
            self._touch_if_stale(sub_id, used_at, now)
        return ready

    def pull_claim(
        self,
        subscription: str,
        selector: Selection | None,
        *,
        window: int,
        session: int,
        tx: int,
        limit: int,
    ) -> tuple[int, list[MessageRow]] | None:
        """None: here a pull and the claim after it are made apart (``Topics.pull_claim``)."""
        return None

    @abstractmethod
    def _refill(self, r: Refill, selector: Selection | None) -> tuple[int, bool]:
        """Pull into ``r``'s subscription, whose topic has messages past its pointer, if
        fewer than half its window are ready (or ``everything`` is asked); (how many it
        has ready now, counted up to half its window plus those taken; whether it pulled)."""

    def _touch_if_stale(self, sub_id: int, used_at: float | None, now: float) -> None:
        """Mark a subscription used (its consumers are alive) now and then, when a take
        did not pull (a pull sets used_at itself)."""
        if used_at is None or now - used_at >= TOUCH_EVERY:
            self._write_rows("touch_subscription", {"subscription": sub_id, "now": now},
                             durable=False)  # fmt: skip

    def backlog(self, subscription: str, selector: Selection | None) -> Backlog:
        """What ``subscription`` has yet to settle (``stats``, lag)."""
        rows = self._read_rows("subscription_row", {"name": subscription})
        if not rows:
            raise QueueNotFound(f"subscription {subscription!r} does not exist")
        sub_id, topic_id, pointer = rows[0]
        query, extra = self._with_selector("topic_backlog", selector)
        with self._transaction(durable=False) as conn:
            unpulled, unpulled_since, unpulled_delayed = conn.execute(
                query, {"pointer": pointer, "topic": topic_id, "now": self.clock.now()} | extra
            ).fetchone()
            held, held_since = conn.execute(
                self._q["subscription_held"], {"subscription": sub_id}
            ).fetchone()
        return Backlog(held, held_since, unpulled, unpulled_since, unpulled_delayed)

    def pass_unselected(self, subscription: str, selector: Selection | None) -> None:
        """Move a selective subscription's pointer past topic messages it will never receive.

        Up to the first one it will (within COLLECT_SPAN ids), so a stopped subscription
        with a narrow selector does not keep the topic's other messages from collection.
        """
        if selector is None:
            return
        rows = self._read_rows("subscription_row", {"name": subscription})
        if not rows:
            return
        sub_id, topic_id, _ = rows[0]
        query, extra = self._with_selector("next_selected", selector)
        with self._transaction(durable=False) as conn:
            (pointer,) = conn.execute(
                self._q["lock_subscription"], {"subscription": sub_id}
            ).fetchone()
            span = {"pointer": pointer, "upto": pointer + COLLECT_SPAN, "topic": topic_id}
            first, last = conn.execute(query, span | extra).fetchone()
            new = first - 1 if first is not None else last
            if new is not None and new > pointer:
                conn.execute(self._q["pass_pointer"], {"subscription": sub_id, "pointer": new})

    def laggards(self) -> list[str]:
        """Selective subscriptions at their topic's lowest pointer."""
        return [name for (name,) in self._read_rows("laggards", {})]

    # --- collecting -----------------------------------------------------------------
    def collect(self, topic: str) -> int:
        """Delete a bounded range of ``topic``'s messages every subscription has passed."""
        with self._transaction(durable=False) as conn:
            return self._collect(conn, topic)

    def _collect(self, conn: Any, topic: str) -> int:
        row = conn.execute(self._q["topic_floor"], {"topic": topic}).fetchone()
        if row is None:
            return 0
        topic_id, collected, floor, last, retention = row
        upto = last if floor is None else floor
        if upto is None or upto <= collected:
            return 0
        upto = min(upto, collected + COLLECT_SPAN)
        kept_before = float("inf") if retention is None else self.clock.now() - retention
        # The topic's newest message is never deleted but kept as done (a tombstone,
        # deleted once a newer one is passed): SQLite gives a new row the highest id
        # plus one, so without it a later message could get an id the subscriptions'
        # pointers have passed already.
        newest = last is not None and upto >= last
        through = last - 1 if newest else upto
        span = {"topic": topic_id, "after": collected, "upto": through}
        deleted: int = conn.execute(
            self._q["collect"], span | {"kept_before": kept_before}
        ).rowcount
        if newest:
            tomb = {"id": last, "now": self.clock.now(), "kept_before": kept_before}
            deleted += conn.execute(self._q["topic_tombstone"], tomb).rowcount
        (remaining,) = conn.execute(self._q["topic_remaining"], span).fetchone()
        done = through if remaining is None else remaining - 1
        if done > collected:
            conn.execute(self._q["set_collected"], {"topic": topic_id, "upto": done})
        return deleted

    def topics(self) -> list[str]:
        """Every topic's name."""
        return [name for (name,) in self._read_rows("topics", {})]

    def ended_subscriptions(self) -> list[str]:
        """Non-durable subscriptions whose session ended; durable ones unused too long."""
        rows = self._read_rows("ended_subscriptions", {"now": self.clock.now()})
        return [name for (name,) in rows]

    def subscriptions_of(self, topic: str) -> list[str]:
        """The names of ``topic``'s subscriptions."""
        return [name for (name,) in self._read_rows("subscriptions_of", {"name": topic})]

    def subscription_info(self, topic: str | None) -> list[Row]:
        """Per subscription (of ``topic``, or all): name, topic, pointer, where, durable,
        expire_after, used_at."""
        return self._read_rows("subscription_info", {"topic": topic})
