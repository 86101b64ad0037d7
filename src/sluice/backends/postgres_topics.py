"""The PostgreSQL backend's topics: a subscription's pull in one statement (refill), no
question before the pulls of a subscription that keeps up with its topic, and such a pull
sent with the claim after it in one round trip (``pull_claim``); for one that does not,
the question asked inside the claim (claim_subscribed), also one round trip."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from sluice.backends.postgres_pooler import LOCAL, begin
from sluice.backends.records import Lane, MessageRow, Row, Selection
from sluice.backends.topics import TOUCH_EVERY, Refill, SqlTopics
from sluice.errors import QueueNotFound

__all__ = ["PostgresTopics"]

# claim_subscribed's answers, when it claimed nothing (the state column of its row of NULLs).
_AHEAD = -1
"""The topic has a message past the subscription's pointer: pull, then claim."""
_GONE = -2
"""There is no such subscription."""


class PostgresTopics(SqlTopics):
    """Topics of ``PostgresBackend`` (mixed into it)."""

    _pooled: bool
    _keeping_up: set[str]
    """Subscriptions whose last pull here found their topic ahead of them (see ``pull``)."""

    @abstractmethod
    def _conn(self) -> AbstractContextManager[psycopg.Connection[Any]]: ...

    @abstractmethod
    def _promote(self, conn: Any, lanes: Sequence[Lane]) -> None: ...

    @abstractmethod
    def _one(self, name: str, params: Any, *, durable: bool = True) -> list[Row]: ...

    @abstractmethod
    def keep_due(self, queue: str, rows: list[Row]) -> list[MessageRow]: ...

    @abstractmethod
    def claiming(self, session: int, tx: int) -> AbstractContextManager[None]: ...

    @abstractmethod
    def rounds(
        self,
        run: Callable[[str, dict[str, Any]], list[MessageRow]],
        session: int,
        tx: int,
        queue: str,
        limit: int,
    ) -> list[MessageRow]: ...

    @abstractmethod
    def _claim(
        self, session: int, tx: int, name: str, params: dict[str, Any]
    ) -> list[MessageRow]: ...

    @abstractmethod
    def claim(
        self, session: int, tx: int, queue: str, limit: int, *, own: bool
    ) -> list[MessageRow]: ...

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
        row = self._refill_row(subscription, selector, window, everything, now)
        return self._pulled(subscription, row, now)

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
        # A subscription that keeps up: its every take pulls (see pull), and the pull and
        # the claim then go in one round trip and one implicit transaction (no Sync
        # between), where they took three (BEGIN with the refill, its COMMIT, the claim).
        # One that does not: the claim asks pull's question itself (_guarded_claim).
        if subscription not in self._keeping_up:
            taken = self._guarded_claim(subscription, session, tx, limit)
            if taken is None:  # the topic is ahead: pulled with the claim, as below
                self._keeping_up.add(subscription)
                return self.pull_claim(subscription, selector, window=window, session=session,
                                       tx=tx, limit=limit)  # fmt: skip
            return 0, taken  # nothing new in the topic: none counted, the next take asks
        now = self.clock.now()
        query, pulling = self._refill_statement(subscription, selector, window, False, now)
        pulled: list[Row | None] = []

        def run(name: str, params: dict[str, Any]) -> list[MessageRow]:
            if pulled:  # a further round: the first took lanes' heads (claim_steps)
                return self._claim(session, tx, name, params)
            with self.claiming(session, tx), self._conn() as conn:
                with conn.pipeline():
                    if self._pooled:
                        conn.execute(LOCAL)
                    refill = conn.execute(query, pulling | {"lanes": False})
                    claimed = conn.execute(self._q[name], params)
                pulled.append(refill.fetchone())
                return self.keep_due(subscription, claimed.fetchall())

        taken = self.rounds(run, session, tx, subscription, limit)
        row = pulled[0]
        if row is None or not row[-1]:
            return self._pulled(subscription, row, now), taken
        # Refused: a lane's message is next. Pulled again where its lane is promoted.
        ready = self.pull(subscription, selector, window=window, everything=False)
        if len(taken) < limit:
            taken += self.claim(session, tx, subscription, limit - len(taken), own=False)
        return ready, taken

    def _guarded_claim(
        self, subscription: str, session: int, tx: int, limit: int
    ) -> list[MessageRow] | None:
        """A plain claim of subscription ``subscription``'s messages that takes nothing
        while its topic has a message past its pointer (claim_subscribed): the claimed
        rows, None when the topic was ahead. QueueNotFound if the subscription is gone."""
        # It also marks the subscription used now and then, as pull's question does.
        ahead: list[int | None] = []

        def run(name: str, params: dict[str, Any]) -> list[MessageRow]:
            if ahead:  # a further round: the first took lanes' heads (claim_steps)
                return self._claim(session, tx, name, params)
            with self.claiming(session, tx):
                rows = self._one("claim_subscribed", params | {"touch_every": TOUCH_EVERY})
            ahead.append(rows[0][1] if rows and rows[0][0] is None else None)
            return self.keep_due(subscription, rows)

        taken = self.rounds(run, session, tx, subscription, limit)
        if ahead[0] == _GONE:
            raise QueueNotFound(f"subscription {subscription!r} does not exist")
        return None if ahead[0] == _AHEAD else taken

    def _pulled(self, name: str, row: Row | None, now: float) -> int:
        """A keeping-up pull's refill row, settled as ``pull`` answers: how many ready."""
        ready, pulled, sub_id, used_at = self._refilled(name, row)
        if not pulled:
            self._touch_if_stale(sub_id, used_at, now)
        return ready

    def _refill(self, r: Refill, selector: Selection | None) -> tuple[int, bool]:
        row = self._refill_row(r.subscription, selector, r.window, r.everything, r.now)
        ready, pulled, _, _ = self._refilled(r.subscription, row)  # unsubscribed since?
        return ready, pulled

    def _refill_row(
        self, name: str, selector: Selection | None, window: int, everything: bool, now: float
    ) -> Row | None:
        """Pull into subscription ``name`` (refill) in a transaction of its own: the
        statement's row; None if there is no such subscription.

        One statement sent with its BEGIN in one round trip, then the COMMIT, where the
        SQLite's path (sqlite_topics) has a count, a lock, a look, an insert and a
        pointer update.
        """
        query, params = self._refill_statement(name, selector, window, everything, now)
        with self._conn() as conn:
            with conn.pipeline():
                begin(conn, durable=False, pooled=self._pooled)
                row = conn.execute(query, params | {"lanes": True}).fetchone()
            if row is not None and row[2]:
                self._promote(conn, [(name, lane) for lane in sorted(row[2])])
            conn.execute("COMMIT")
        return row

    def _refill_statement(
        self, name: str, selector: Selection | None, window: int, everything: bool, now: float
    ) -> tuple[str, dict[str, Any]]:
        """The refill of subscription ``name`` and its parameters, but ``lanes``."""
        query, extra = self._with_selector("refill", selector)
        params = {"name": name, "half": (window + 1) // 2, "window": window}
        return query, params | {"everything": everything, "now": now} | extra

    def _refilled(self, name: str, row: Row | None) -> tuple[int, bool, int, float | None]:
        """A refill's row: (how many ready, whether it pulled, the subscription's id, when
        it was last used); whether the subscription keeps up. QueueNotFound if it is gone."""
        if row is None:
            self._keeping_up.discard(name)
            raise QueueNotFound(f"subscription {name!r} does not exist")
        ready, taken, _, moved, sub_id, used_at, _ = row
        if not moved:
            self._keeping_up.discard(name)
            return int(ready), False, int(sub_id), used_at
        self._keeping_up.add(name)
        return int(ready) + int(taken), True, int(sub_id), used_at
