"""Random sequences of queue operations against a model of the semantics.

The model is the specification in a few lines: committed messages in delivery
order (priority, then place), transactions that see their own enqueues, abort
and release returning messages to their original place with one more attempt.
Every dequeue must return exactly what the model predicts, on every backend.
"""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

import sluice


@dataclass
class Row:
    body: int
    priority: int
    place: int
    attempts: int = 0
    holder: int | None = None  # model transaction holding it
    owner: int | None = None  # model transaction that enqueued it, until it commits


@dataclass
class ModelTx:
    number: int
    real: sluice.Transaction
    buffered: list[tuple[int, int]] = field(default_factory=list)  # (body, priority)
    taken: list[int] = field(default_factory=list)  # bodies held


class QueueModel(RuleBasedStateMachine):
    backend = "memory"
    txs = Bundle("txs")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        url = "memory://" if self.backend == "memory" else f"sqlite:///{Path(self.tmp.name)}/q.db"
        self.db = sluice.connect(url, synchronous="OFF")
        self.q = self.db.create_queue("q")
        self.rows: dict[int, Row] = {}
        self.places = itertools.count()
        self.bodies = itertools.count()
        self.numbers = itertools.count()
        self.open: dict[int, ModelTx] = {}

    def teardown(self) -> None:
        self.db.close()
        self.tmp.cleanup()

    # --- the model's view ----------------------------------------------------------
    def _visible(self, tx: ModelTx | None) -> list[Row]:
        me = tx.number if tx else None
        rows = [
            r for r in self.rows.values() if r.holder is None and (r.owner is None or r.owner == me)
        ]
        return sorted(rows, key=lambda r: (-r.priority, r.place))

    def _flush(self, tx: ModelTx) -> None:
        for body, priority in tx.buffered:
            self.rows[body] = Row(body, priority, next(self.places), owner=tx.number)
        tx.buffered.clear()

    # --- rules ---------------------------------------------------------------------
    @rule(priority=st.integers(0, 2))
    def put(self, priority: int) -> None:
        body = next(self.bodies)
        self.q.put(body, priority=priority)
        self.rows[body] = Row(body, priority, next(self.places))

    @precondition(lambda self: len(self.open) < 3)
    @rule(target=txs)
    def begin(self) -> int:
        number = next(self.numbers)
        self.open[number] = ModelTx(number, self.db.begin())
        return number

    @rule(number=txs, priority=st.integers(0, 2))
    def enqueue(self, number: int, priority: int) -> None:
        tx = self.open.get(number)
        if tx is None:
            return
        body = next(self.bodies)
        tx.real.enqueue("q", body, priority=priority)
        tx.buffered.append((body, priority))

    @rule(number=txs, limit=st.integers(1, 4))
    def dequeue(self, number: int, limit: int) -> None:
        tx = self.open.get(number)
        if tx is None:
            return
        self._flush(tx)
        expected = self._visible(tx)[:limit]
        got = tx.real.dequeue("q", limit=limit)
        assert [m.body for m in got] == [r.body for r in expected]
        assert [m.attempts for m in got] == [r.attempts for r in expected]
        for r in expected:
            r.holder = number
            tx.taken.append(r.body)

    @rule(number=txs, pick=st.integers(0, 10))
    def release(self, number: int, pick: int) -> None:
        tx = self.open.get(number)
        if tx is None or not tx.taken:
            return
        body = tx.taken.pop(pick % len(tx.taken))
        message = next(m for m in tx.real._held.values() if m.body == body)
        tx.real.release(message)
        row = self.rows[body]
        row.holder = None
        if row.owner is None:
            row.attempts += 1

    @rule(number=consumes(txs))
    def commit(self, number: int) -> None:
        tx = self.open.pop(number, None)
        if tx is None:
            return
        tx.real.commit()
        for body in tx.taken:
            del self.rows[body]
        pending = sorted(
            (r for r in self.rows.values() if r.owner == number), key=lambda r: r.place
        )
        for r in pending:
            r.owner, r.place = None, next(self.places)
        for body, priority in tx.buffered:
            self.rows[body] = Row(body, priority, next(self.places))

    @rule(number=consumes(txs))
    def abort(self, number: int) -> None:
        tx = self.open.pop(number, None)
        if tx is None:
            return
        tx.real.abort()
        for body in tx.taken:
            row = self.rows[body]
            row.holder = None
            if row.owner is None:
                row.attempts += 1
        for body in [b for b, r in self.rows.items() if r.owner == number]:
            del self.rows[body]

    # --- what anyone outside sees ----------------------------------------------------
    @invariant()
    def browse_matches(self) -> None:
        seen = self.q.browse(limit=10_000)
        expected = self._visible(None)
        assert [(m.body, m.attempts) for m in seen] == [(r.body, r.attempts) for r in expected]

    @invariant()
    def counts_match(self) -> None:
        stats = self.q.stats()
        assert stats["claimed"] == sum(1 for r in self.rows.values() if r.holder is not None)
        assert stats["pending"] == sum(
            1 for r in self.rows.values() if r.owner is not None and r.holder is None
        )


class SQLiteQueueModel(QueueModel):
    backend = "sqlite"


_settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMemoryModel = QueueModel.TestCase
TestMemoryModel.settings = _settings
TestSQLiteModel = SQLiteQueueModel.TestCase
TestSQLiteModel.settings = _settings
