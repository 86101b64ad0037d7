"""The PostgreSQL backend's topics: a subscription's pull in one statement (refill), and no
question before the pulls of a subscription that keeps up with its topic."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from sluice.backends.postgres_pooler import begin
from sluice.backends.records import Lane, Selection
from sluice.backends.topics import Refill, SqlTopics
from sluice.errors import QueueNotFound

__all__ = ["PostgresTopics"]


class PostgresTopics(SqlTopics):
    """Topics of ``PostgresBackend`` (mixed into it)."""

    _pooled: bool
    _keeping_up: set[str]
    """Subscriptions whose last pull here found their topic ahead of them (see ``pull``)."""

    @abstractmethod
    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    @abstractmethod
    def _promote(self, conn: Any, lanes: Sequence[Lane]) -> None: ...

    def pull(
        self, subscription: str, selector: Selection | None, *, window: int, everything: bool
    ) -> int:
        # A consumer that keeps up with its topic finds it one message ahead at every take:
        # once a pull here found the topic ahead, the next ones go straight to the refill,
        # which finds for itself whether there is anything to take, and the question
        # (subscription_state's round trip) comes back once a refill finds nothing.
        if subscription not in self._keeping_up:
            return super().pull(subscription, selector, window=window, everything=everything)
        now = self.clock.now()
        found = self._refill_named(subscription, selector, window, everything, now)
        if found is None:
            raise QueueNotFound(f"subscription {subscription!r} does not exist")
        ready, pulled, sub_id, used_at = found
        if not pulled:
            self._touch_if_stale(sub_id, used_at, now)
        return ready

    def _refill(self, r: Refill, selector: Selection | None) -> tuple[int, bool]:
        found = self._refill_named(r.subscription, selector, r.window, r.everything, r.now)
        if found is None:  # unsubscribed since the question
            raise QueueNotFound(f"subscription {r.subscription!r} does not exist")
        return found[0], found[1]

    def _refill_named(
        self, name: str, selector: Selection | None, window: int, everything: bool, now: float
    ) -> tuple[int, bool, int, float | None] | None:
        """Pull into subscription ``name`` (refill): (how many it has ready, whether it
        pulled, its id, when it was last used); None if there is no such subscription.

        One statement sent with its BEGIN in one round trip, then the COMMIT, where the
        SQLite's path (sqlite_topics) has a count, a lock, a look, an insert and a
        pointer update.
        """
        query, extra = self._with_selector("refill", selector)
        params = {"name": name, "half": (window + 1) // 2, "window": window}
        params |= {"everything": everything, "now": now}
        with self._conn() as conn:
            with conn.pipeline():
                begin(conn, durable=False, pooled=self._pooled)
                row = conn.execute(query, params | extra).fetchone()
            if row is not None:
                ready, taken, lanes, moved, sub_id, used_at = row
                if lanes:
                    self._promote(conn, [(name, lane) for lane in sorted(lanes)])
            conn.execute("COMMIT")
        if row is None or not moved:
            self._keeping_up.discard(name)
            return None if row is None else (int(ready), False, int(sub_id), used_at)
        self._keeping_up.add(name)
        return int(ready) + int(taken), True, int(sub_id), used_at
