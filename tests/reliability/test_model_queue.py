"""Random sequences of queue operations, on every backend, against a reference model.

The model is the documents in a few hundred lines (docs/queues.md, transactions.md,
isolation.md, delivery.md, topics.md): committed messages in delivery order
(priority, then place), transactions that see their own enqueues and settle all at
once, release and abort returning a message to its place with one more attempt (to
the error queue, or failed, after ``max_attempts``), reject at commit, priority
levels, delay and expiry on a ``ManualClock``, the isolation levels' lanes (a
writer's, a block's or a group's messages: one holder at a time, in order, whole
blocks per commit) and a topic whose subscriptions each get every message once, in
order, and settle apart. Every dequeue, get and browse must return exactly what the
model predicts (bodies, order, attempts, priorities, times, errors); after every step
the stats of every queue (the topic and subscriptions too), what each shows ready and
each subscription's lag must agree with it.

Where the documents are silent the model follows sluice: a batch dequeue takes the
next messages of lanes it holds before others, a topic's message that expires before
a subscription pulls it never reaches that subscription (not even as expired), and a
subscription pulls before every take and browse, never at stats. The examples share
one database (file, schema) per backend, each on queues of its own names.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import sluice
from sluice.catalog import Isolation
from tests.conftest import BACKENDS, url_for

T0 = 1_800_000_000.0
Q, TOPIC = "q", "t"
SUBSCRIPTIONS = ("s1", "s2")
ISOLATIONS: tuple[Isolation, ...] = ("none", "ordered", "blockwise", "ordered_blockwise")
BLOCKWISE = ("blockwise", "ordered_blockwise")
Lane = tuple[str, int | str]

# Per backend: examples, steps per example. PostgreSQL pays a round trip per statement.
BUDGET = {"memory": (100, 50), "sqlite": (60, 50), "postgresql": (30, 40)}


def level(priority: int, levels: int | None) -> int:
    """docs/delivery.md's table: level 0 holds 0 to 5 - ceil(N/2), then one level per
    priority, the highest takes the rest; below 0 and above 9 are clamped."""
    if levels is None:
        return priority
    low = 5 - math.ceil(levels / 2)
    return min(max(min(max(priority, 0), 9) - low, 0), levels - 1)


@dataclass(frozen=True)
class Options:
    """An enqueue's options as the rules draw them."""

    priority: int | None
    delay: int
    ttl: int | None
    group: str | None


OPTIONS = st.builds(
    Options,
    priority=st.sampled_from([None, 0, 1, 4, 5, 6, 9, -2, 12]),
    delay=st.sampled_from([0, 0, 0, 5, 15]),
    ttl=st.sampled_from([None, None, None, 10, 25]),
    group=st.sampled_from([None, None, "a", "b"]),
)


@dataclass(frozen=True)
class Setting:
    """What the model needs of a queue's settings."""

    isolation: Isolation = "none"
    levels: int | None = None
    max_attempts: int | None = None
    error_queue: str | None = None


@dataclass(eq=False)
class Msg:
    """One message in one queue (a topic's message has a copy per subscription)."""

    body: int
    queue: str
    priority: int  # as stored: a leveled queue's level
    producer: int  # the model transaction that enqueued it: its block
    lane: Lane | None
    enqueued: float
    available: float
    expires: float | None
    group: str | None
    place: int = -1  # delivery order within a priority (the row's id)
    attempts: int = 0
    holder: int | None = None  # the model transaction that holds it
    owner: int | None = None  # the transaction that enqueued it, until that commits
    flushed: bool = False  # an owner's enqueue written as pending (its reads flush)
    failed: bool = False
    error: str | None = None
    origin: str | None = None
    pulled: bool = True  # a subscription's copy: taken from its topic yet


@dataclass(eq=False)
class ModelTx:
    """An open transaction: the real one, and what the model knows of it."""

    number: int
    real: sluice.Transaction
    enqueued: list[Msg] = field(default_factory=list)
    buffered: set[str] = field(default_factory=set)
    held: list[tuple[sluice.Message, Msg]] = field(default_factory=list)
    rejects: dict[Msg, str] = field(default_factory=dict)


def key(m: Msg) -> tuple[int, int]:
    return (-m.priority, m.place)


def seen(messages: list[sluice.Message], prefix: str) -> list[tuple[object, ...]]:
    return [
        (m.body, m.attempts, m.priority, m.group, m.error,
         m.origin_queue and m.origin_queue.removeprefix(prefix), m.enqueued, m.available,
         m.expires)
        for m in messages
    ]  # fmt: skip


def expect(msgs: list[Msg]) -> list[tuple[object, ...]]:
    return [
        (
            m.body,
            m.attempts,
            m.priority,
            m.group,
            m.error,
            m.origin,
            m.enqueued,
            m.available,
            m.expires,
        )
        for m in msgs
    ]


class Site:
    """One database per backend for a whole test run (a file, a schema), and its
    connections: each example works on queues of its own names in it."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend = backend
        self.clock = sluice.ManualClock(T0)
        # Separate connections are separate writers (docs/isolation.md); an in-memory
        # database has only one. A long lease: no heartbeat thread expires or collects
        # anything between steps.
        self.dbs = [
            sluice.connect(url, clock=self.clock, lease=3600,
                           synchronous="OFF" if backend == "sqlite" else None)  # no fsync
            for _ in range(1 if backend == "memory" else 2)
        ]  # fmt: skip
        self.examples = itertools.count()

    def close(self) -> None:
        for db in self.dbs:
            db.close()


class QueueMachine(RuleBasedStateMachine):
    site: Site  # each backend's subclass gives its own (the test below)

    def __init__(self) -> None:
        super().__init__()
        site = self.site
        self.clock = site.clock
        self.dbs = site.dbs
        self.prefix = f"x{next(site.examples)}-"
        self.settings: dict[str, Setting] = {}
        self.msgs: list[Msg] = []
        self.open: dict[int, ModelTx] = {}
        self.places = itertools.count()
        self.bodies = itertools.count()
        self.numbers = itertools.count(1)
        self.writers: dict[int, int] = {}  # each open transaction's connection

    def teardown(self) -> None:
        """Its transactions aborted and its queues dropped: the next example's start empty,
        and the database does not grow over a run."""
        # Not under test: after a failed step this must not hide the failure.
        with contextlib.suppress(sluice.SluiceError):
            for t in self.open.values():
                t.real.abort()
            if self.settings:
                db = self.dbs[0]
                for name in SUBSCRIPTIONS:
                    db.unsubscribe(self.name(name))
                for name in (TOPIC, Q, *(n for n in self.settings if n.endswith(".dead"))):
                    db.drop_queue(self.name(name))

    def name(self, queue: str) -> str:
        """The queue's name in the database: this example's own."""
        return self.prefix + queue

    @property
    def now(self) -> float:
        return self.clock.now()

    # --- setup ---------------------------------------------------------------------
    @initialize(
        isolation=st.sampled_from(ISOLATIONS),
        levels=st.sampled_from([None, None, 1, 2, 3, 5, 10]),
        max_attempts=st.sampled_from([None, 1, 2, 3]),
        dead=st.booleans(),
        topic_levels=st.sampled_from([None, 3]),
        sub_attempts=st.sampled_from([None, 1, 2]),
        sub_dead=st.booleans(),
        seed=st.lists(
            st.tuples(st.sampled_from([Q, TOPIC]), st.integers(1, 3), OPTIONS), max_size=4
        ),
    )
    def create(
        self,
        *,
        isolation: Isolation,
        levels: int | None,
        max_attempts: int | None,
        dead: bool,
        topic_levels: int | None,
        sub_attempts: int | None,
        sub_dead: bool,
        seed: list[tuple[str, int, Options]],
    ) -> None:
        db = self.dbs[0]
        q = Setting(isolation, levels, max_attempts, "q.dead" if dead else None)
        db.create_queue(self.name(Q), isolation=isolation, priority_levels=levels,
                        max_attempts=max_attempts,
                        error_queue=self.name("q.dead") if dead else None)  # fmt: skip
        db.create_topic(self.name(TOPIC), priority_levels=topic_levels)
        s2 = Setting(max_attempts=sub_attempts, error_queue="s2.dead" if sub_dead else None)
        db.subscribe(self.name(TOPIC), self.name("s1"))
        db.subscribe(self.name(TOPIC), self.name("s2"), max_attempts=sub_attempts,
                     error_queue=self.name("s2.dead") if sub_dead else None)  # fmt: skip
        self.settings = {Q: q, TOPIC: Setting(levels=topic_levels), "s1": Setting(), "s2": s2}
        for error_queue in (q.error_queue, s2.error_queue):
            if error_queue is not None:
                self.settings[error_queue] = Setting()
        for n, (to, count, options) in enumerate(seed):  # something to take from the start
            self.put(n, to, count, options)

    @property
    def consumed(self) -> list[str]:
        """Every queue that consumers take from: the queue, subscriptions, error queues."""
        return [name for name in self.settings if name != TOPIC]

    # --- the model's view ----------------------------------------------------------
    def expired(self, m: Msg) -> bool:
        return m.expires is not None and m.expires <= self.now

    def due(self, m: Msg) -> bool:
        return m.available <= self.now

    def live(self, queue: str) -> list[Msg]:
        """Committed messages nobody holds, not failed or expired (due or not)."""
        return sorted(
            (
                m
                for m in self.msgs
                if m.queue == queue
                and m.owner is None
                and m.holder is None
                and m.pulled
                and not m.failed
                and not self.expired(m)
            ),
            key=key,
        )

    def own(self, number: int, queue: str) -> list[Msg]:
        """A transaction's own enqueues it may take: written, not held, due, unexpired."""
        return [
            m
            for m in self.msgs
            if m.queue == queue
            and m.owner == number
            and m.flushed
            and m.holder is None
            and self.due(m)
            and not self.expired(m)
        ]

    def holder(self, queue: str, lane: Lane) -> int | None:
        """The transaction that holds a lane: one holding a message of it not its own."""
        for m in self.msgs:
            if m.queue == queue and m.lane == lane and m.holder not in (None, m.owner):
                return m.holder
        return None

    def lane_line(self, queue: str, lane: Lane) -> list[Msg]:
        return sorted((m for m in self.live(queue) if m.lane == lane), key=lambda m: m.place)

    def candidates(self, number: int, queue: str) -> list[Msg]:
        """What a transaction's fresh claim may take, in delivery order: due messages in
        no lane, each free lane's oldest message if due (its head), its own enqueues."""
        out = self.own(number, queue)
        heads: dict[Lane, Msg] = {}
        for m in sorted(self.live(queue), key=lambda m: m.place):
            if m.lane is not None and m.lane not in heads:
                heads[m.lane] = m
        for m in self.live(queue):
            if not self.due(m):
                continue
            if m.lane is None or (heads[m.lane] is m and self.holder(queue, m.lane) is None):
                out.append(m)
        return sorted(out, key=key)

    def ready(self, queue: str, number: int | None = None) -> list[Msg]:
        """What browse shows as ready (as transaction ``number`` sees it)."""
        out = [m for m in self.live(queue) if self.due(m)]
        if number is not None:
            out += self.own(number, queue)
        return sorted(out, key=key)

    def stats(self, queue: str) -> dict[str, int]:
        counts = dict.fromkeys(
            ("ready", "delayed", "pending", "claimed", "expired", "failed", "done"), 0
        )
        for m in self.msgs:
            if m.queue != queue or (m.owner is not None and not m.flushed and m.holder is None):
                continue
            if not m.pulled:  # docs/topics.md: its topic's messages it has yet to take
                counts["ready" if self.due(m) else "delayed"] += 1
            elif m.holder is not None:
                counts["claimed"] += 1
            elif m.owner is not None:
                counts["pending"] += 1
            elif m.failed:
                counts["failed"] += 1
            elif self.expired(m):
                counts["expired"] += 1
            elif not self.due(m):
                counts["delayed"] += 1
            else:
                counts["ready"] += 1
        return counts

    # --- the model's moves ---------------------------------------------------------
    def lane(self, queue: str, group: str | None, writer: int, producer: int) -> Lane | None:
        """docs/isolation.md: a group's lane, else the writer's or the block's."""
        if group is not None:
            return ("g", group)
        isolation = self.settings[queue].isolation
        if isolation in ("ordered", "ordered_blockwise"):
            return ("w", writer)
        if isolation == "blockwise":
            return ("b", producer)
        return None

    def new(
        self, queue: str, count: int, options: Options, writer: int, producer: int
    ) -> list[Msg]:
        group = options.group if queue == Q else None
        now = self.now
        msgs = [
            Msg(
                body=next(self.bodies),
                queue=queue,
                priority=level(options.priority or 0, self.settings[queue].levels),
                producer=producer,
                lane=self.lane(queue, group, writer, producer) if queue == Q else None,
                enqueued=now,
                available=now + options.delay,
                expires=None if options.ttl is None else now + options.ttl,
                group=group,
                owner=producer,
            )
            for _ in range(count)
        ]
        self.msgs += msgs
        return msgs

    @staticmethod
    def options(queue: str, options: Options) -> sluice.EnqueueOptions:
        given = sluice.EnqueueOptions(delay=options.delay, ttl=options.ttl)
        if options.priority is not None:
            given["priority"] = options.priority
        if options.group is not None and queue == Q:
            given["group"] = options.group
        return given

    def publish(self, msgs: list[Msg]) -> None:
        """A commit: messages take their places in commit order; each of a topic's goes
        to every subscription (docs/topics.md)."""
        for m in msgs:
            m.owner, m.flushed, m.place = None, False, next(self.places)
            if m.queue == TOPIC:  # pulled later, in this order (its ids are commit order)
                for name in SUBSCRIPTIONS:
                    self.msgs.append(replace(m, queue=name, lane=None, group=None, pulled=False))

    def pull(self, subscription: str) -> None:
        """A subscription takes its topic's messages past its pointer (before every take
        and browse): those that expired in the topic meanwhile it never receives."""
        for m in [m for m in self.msgs if m.queue == subscription and not m.pulled]:
            if self.expired(m):
                self.msgs.remove(m)
            else:
                m.pulled = True

    def expire(self) -> None:
        """What every expiry run (stats, purge) does to a topic's messages no
        subscription pulled yet: expired in the topic, they are nobody's."""
        for name in SUBSCRIPTIONS:
            for m in [m for m in self.msgs if m.queue == name and not m.pulled]:
                if self.expired(m):
                    self.msgs.remove(m)

    def flush(self, tx: ModelTx, queue: str) -> None:
        """Reading a queue it wrote to writes a transaction's enqueues (transaction.py)."""
        if queue in tx.buffered:
            for m in tx.enqueued:
                if not m.flushed:
                    m.flushed, m.place = True, next(self.places)
            tx.buffered.clear()

    def give_back(self, number: int, m: Msg) -> None:
        """Release or abort: to its place, attempts + 1 (its own enqueue: pending again)."""
        m.holder = None
        if m.owner == number:
            return
        m.attempts += 1
        limit = self.settings[m.queue].max_attempts
        if limit is not None and m.attempts >= limit:
            self.dead(m, f"reached max_attempts ({limit})")

    def dead(self, m: Msg, reason: str) -> None:
        """To the error queue, or failed where there is none; out of its lane."""
        error_queue = self.settings[m.queue].error_queue
        m.holder, m.owner, m.lane, m.error, m.origin = None, None, None, reason, m.queue
        if error_queue is None:
            m.failed = True
        else:
            m.queue = error_queue

    def rounds(self, number: int, queue: str, limit: int, lanes: set[Lane], fill: bool
               ) -> list[Msg]:  # fmt: skip
        """A claim: the next messages of the lanes it holds first (in place order, each
        lane's run stopping at one not due), then fresh candidates; lanes it took a
        head of offer it their next messages in the following round."""
        rows: list[Msg] = []
        owned = set(lanes)
        while len(rows) < limit:
            room = limit - len(rows)
            taken: list[Msg] = []
            for lane in owned:
                line = self.lane_line(queue, lane)[:room]
                taken += itertools.takewhile(self.due, line)
            taken.sort(key=lambda m: m.place)
            if fill or not lanes or not owned:
                taken += self.candidates(number, queue)[:room]
            taken = taken[:room]
            if not taken:
                break
            for m in taken:
                m.holder = number
            rows += taken
            more = {m.lane for m in taken if m.lane is not None and m.owner != number}
            if not more:
                break
            owned |= more
        return rows

    def claim(self, number: int, queue: str, limit: int) -> list[Msg]:
        """docs/isolation.md: a dequeue takes a lane's head, then follows the lane; on
        the blockwise levels it finishes the blocks it holds before it starts another."""
        isolation = self.settings[queue].isolation
        blockwise = isolation in BLOCKWISE
        held = {
            m.lane
            for m in self.msgs
            if m.queue == queue and m.holder == number and m.owner != number and m.lane
        }
        if held:
            rows = self.rounds(number, queue, limit, held, fill=not blockwise)
            if rows or not blockwise:
                return rows
        if isolation == "none":
            return self.rounds(number, queue, limit, set(), fill=True)
        rows = self.rounds(number, queue, 1, set(), fill=True)
        lanes = {m.lane for m in rows if m.lane is not None and m.owner != number}
        if lanes and limit > 1:
            rows += self.rounds(number, queue, limit - 1, lanes, fill=not blockwise)
        elif rows and limit > 1:  # its own enqueue, in no lane: then on as afresh
            rows += self.claim(number, queue, limit - 1)
        return rows

    def incomplete(self, number: int, held: list[Msg]) -> bool:
        """Whether a commit holds part of a block: a lane's oldest message left is of a
        block it holds messages of (docs/isolation.md)."""
        blocks: dict[tuple[str, Lane], set[int]] = {}
        for m in held:
            if m.lane is None or m.owner == number or m.lane[0] == "g":
                continue
            if self.settings[m.queue].isolation in BLOCKWISE:
                blocks.setdefault((m.queue, m.lane), set()).add(m.producer)
        for (queue, lane), producers in blocks.items():
            line = self.lane_line(queue, lane)
            if line and line[0].producer in producers:
                return True
        return False

    def settle(self, tx: ModelTx) -> None:
        """A commit's effect on the model: held messages done or rejected, enqueues
        published in enqueue order."""
        for _, m in tx.held:
            if m in tx.rejects:
                self.dead(m, tx.rejects[m])
            else:
                m.holder, m.owner = None, None
                self.msgs.remove(m)
        self.publish([m for m in tx.enqueued if m.owner == tx.number])

    def pick(self, index: int) -> ModelTx:
        return self.open[sorted(self.open)[index % len(self.open)]]

    def pick_or_begin(self, index: int) -> ModelTx:
        """Open transaction ``index``, or a new one (up to three at once) on connection
        ``index``: there is no rule of its own to begin one, which swarm testing could
        leave out of a whole example."""
        if index < len(self.open):
            return self.pick(index)
        writer = index % len(self.dbs)
        number = next(self.numbers)
        self.open[number] = ModelTx(number, self.dbs[writer].begin())
        self.writers[number] = writer
        return self.open[number]

    def check(self, got: list[sluice.Message], want: list[Msg]) -> None:
        assert seen(got, self.prefix) == expect(want)

    # --- rules -----------------------------------------------------------------------
    @rule(writer=st.integers(0, 1), to=st.sampled_from([Q, Q, TOPIC]), count=st.integers(1, 3),
          options=OPTIONS)  # fmt: skip
    def put(self, writer: int, to: str, count: int, options: Options) -> None:
        writer %= len(self.dbs)
        msgs = self.new(to, count, options, writer, next(self.numbers))
        self.dbs[writer].queue(self.name(to)).put_many(
            [m.body for m in msgs], **self.options(to, options)
        )
        self.publish(msgs)

    @rule(tx=st.integers(0, 2), to=st.sampled_from([Q, Q, TOPIC]), count=st.integers(1, 3),
          options=OPTIONS)  # fmt: skip
    def enqueue(self, tx: int, to: str, count: int, options: Options) -> None:
        t = self.pick_or_begin(tx)
        msgs = self.new(to, count, options, self.writers[t.number], t.number)
        t.real.enqueue_many(self.name(to), [m.body for m in msgs], **self.options(to, options))
        t.enqueued += msgs
        t.buffered.add(to)

    @rule(tx=st.integers(0, 2), source=st.sampled_from([Q, Q, "s1", "s2"]),
          limit=st.integers(1, 4))  # fmt: skip
    def dequeue(self, tx: int, source: str, limit: int) -> None:
        t = self.pick_or_begin(tx)
        self.flush(t, source)
        self.pull(source)
        want = self.claim(t.number, source, limit)
        got = t.real.dequeue(self.name(source), limit=limit)
        self.check(got, want)
        t.held += zip(got, want, strict=True)

    @precondition(lambda self: self.open)
    @rule(tx=st.integers(0, 2), source=st.sampled_from([Q, "s1", "s2"]))
    def browse_in_transaction(self, tx: int, source: str) -> None:
        t = self.pick(tx)
        self.flush(t, source)
        self.pull(source)
        self.check(t.real.browse(self.name(source), limit=1000), self.ready(source, t.number))

    @precondition(lambda self: any(t.held for t in self.open.values()))
    @rule(tx=st.integers(0, 2), which=st.integers(0, 7))
    def release(self, tx: int, which: int) -> None:
        t = self.pick(tx)
        if not t.held:
            return
        real, m = t.held[which % len(t.held)]
        later = any(
            o.queue == m.queue and o.lane == m.lane and o.place > m.place and o.owner != t.number
            for _, o in t.held
        )
        if m.lane is not None and m.owner != t.number and later:
            # docs/isolation.md: last taken, first given back.
            with pytest.raises(sluice.MessageStateError):
                t.real.release(real)
            return
        t.real.release(real)
        t.held.remove((real, m))
        t.rejects.pop(m, None)
        self.give_back(t.number, m)

    @precondition(lambda self: any(t.held for t in self.open.values()))
    @rule(tx=st.integers(0, 2), which=st.integers(0, 7))
    def reject(self, tx: int, which: int) -> None:
        t = self.pick(tx)
        if not t.held:
            return
        real, m = t.held[which % len(t.held)]
        t.real.reject(real, f"bad {m.body}")
        t.rejects[m] = f"bad {m.body}"

    @precondition(lambda self: self.open)
    @rule(tx=st.integers(0, 2))
    def commit(self, tx: int) -> None:
        t = self.pick(tx)
        if self.incomplete(t.number, [m for _, m in t.held]):
            with pytest.raises(sluice.IncompleteBlock):
                t.real.commit()  # and the transaction stays open
            return
        t.real.commit()
        del self.open[t.number]
        self.settle(t)
        with pytest.raises(sluice.TransactionClosed):  # docs/transactions.md
            t.real.dequeue(self.name(Q))

    @precondition(lambda self: self.open)
    @rule(tx=st.integers(0, 2))
    def abort(self, tx: int) -> None:
        t = self.pick(tx)
        t.real.abort()
        del self.open[t.number]
        for _, m in t.held:
            self.give_back(t.number, m)
        for m in t.enqueued:
            if m.owner == t.number:
                self.msgs.remove(m)

    @rule(writer=st.integers(0, 1), source=st.integers(0, 5),
          settle=st.sampled_from(["ack", "release", "reject"]))  # fmt: skip
    def get(self, writer: int, source: int, settle: Literal["ack", "release", "reject"]) -> None:
        """Queue.get in a transaction of its own, settled through the message."""
        name = self.consumed[source % len(self.consumed)]
        number = next(self.numbers)
        self.pull(name)
        want = self.claim(number, name, 1)
        got = self.dbs[writer % len(self.dbs)].queue(self.name(name)).get()
        self.check([] if got is None else [got], want)
        if got is None:
            return
        (m,) = want
        if settle != "release" and self.incomplete(number, want):
            with pytest.raises(sluice.IncompleteBlock):
                if settle == "ack":
                    got.ack()
                else:
                    got.reject(f"bad {m.body}")
            settle = "release"  # the only way on without the rest of the block
        if settle == "ack":
            got.ack()
            self.msgs.remove(m)
        elif settle == "reject":
            got.reject(f"bad {m.body}")
            self.dead(m, f"bad {m.body}")
        else:
            got.release()
            self.give_back(number, m)
        with pytest.raises(sluice.MessageStateError):  # docs/queues.md: settled once
            got.ack()

    @rule(seconds=st.sampled_from([1, 5, 10, 20]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule(source=st.integers(0, 5), state=st.sampled_from(["expired", "failed"]))
    def purge(self, source: int, state: Literal["expired", "failed"]) -> None:
        name = self.consumed[source % len(self.consumed)]
        self.expire()
        gone = [m for m in self.msgs if m.queue == name and self.stats_state(m) == state]
        assert self.dbs[0].queue(self.name(name)).purge(state) == len(gone)
        for m in gone:
            self.msgs.remove(m)

    def stats_state(self, m: Msg) -> str:
        if m.holder is not None or m.owner is not None or not m.pulled:
            return "live"
        if m.failed:
            return "failed"
        return "expired" if self.expired(m) else "live"

    @rule(source=st.integers(0, 6))
    def browse_every_state(self, source: int) -> None:
        """Every state's browse of a queue (the topic and subscriptions too: browsing a
        subscription pulls, after which it shows what a queue does)."""
        name = list(self.settings)[source % len(self.settings)]
        if name in SUBSCRIPTIONS:
            self.pull(name)
        self.browse_agrees(name, every_state=True)

    def browse_agrees(self, name: str, *, every_state: bool = False) -> None:
        handle = self.dbs[0].queue(self.name(name))
        self.check(handle.browse(limit=1000), self.ready(name))
        if not every_state:
            return
        delayed = [m for m in self.live(name) if not self.due(m)]
        self.check(handle.browse(limit=1000, state="delayed"), delayed)
        mine = [m for m in self.msgs if m.queue == name]
        claimed = sorted((m for m in mine if m.holder is not None), key=key)
        self.check(handle.browse(limit=1000, state="claimed"), claimed)
        expired = sorted((m for m in mine if self.stats_state(m) == "expired"), key=key)
        self.check(handle.browse(limit=1000, state="expired"), expired)
        failed = sorted((m for m in mine if self.stats_state(m) == "failed"), key=key)
        self.check(handle.browse(limit=1000, state="failed"), failed)

    # --- what everyone sees ----------------------------------------------------------
    @invariant()
    def stats_and_browse_agree(self) -> None:
        """Stats of every queue, the topic and subscriptions included; what each but the
        subscriptions shows ready (browsing one would pull: a rule does that); how far
        behind each subscription is."""
        if not self.settings:
            return
        self.expire()  # stats run expiry first
        for name in self.settings:
            assert self.dbs[0].queue(self.name(name)).stats() == self.stats(name), name
        for name in self.settings:
            if name not in SUBSCRIPTIONS:
                self.browse_agrees(name)
        lag = {
            s.name.removeprefix(self.prefix): (s.held, s.backlog)
            for s in self.dbs[0].subscriptions(self.name(TOPIC))
        }
        assert lag == {name: self.lag(name) for name in SUBSCRIPTIONS}

    def lag(self, subscription: str) -> tuple[int, int]:
        """docs/topics.md: held (taken from the topic, not settled), backlog (not taken)."""
        mine = [m for m in self.msgs if m.queue == subscription]
        held = sum(1 for m in mine if m.pulled and self.stats_state(m) == "live")
        return held, sum(1 for m in mine if not m.pulled)


@pytest.fixture
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    backend: str = request.param
    made = Site(backend, url_for(backend, tmp_path, request))  # PostgreSQL: a new schema
    yield made
    made.close()


@pytest.mark.parametrize("site", BACKENDS, indirect=True)
def test_queue_api_agrees_with_its_model(site: Site) -> None:
    here = site

    class OnBackend(QueueMachine):
        site = here

    examples, steps = BUDGET[site.backend]
    run_state_machine_as_test(
        OnBackend,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# What the model found, kept as plain tests: the derandomized examples need not meet them.
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_batch_that_starts_with_its_own_enqueue_takes_the_rest_too(
    db: sluice.Database, isolation: Isolation
) -> None:
    db.create_queue("steps", isolation=isolation)
    db.queue("steps").put_many(["a", "b"])
    tx = db.begin()
    tx.enqueue_many("steps", ["mine", "mine too"], priority=5)
    assert [m.body for m in tx.dequeue("steps", limit=4)] == ["mine", "mine too", "a", "b"]
    tx.abort()


def test_a_delayed_message_still_in_the_topic_counts_as_delayed(db: sluice.Database) -> None:
    db.create_topic("news")
    db.subscribe("news", "reader")
    db.queue("news").put("later", delay=3600)
    expected = {"ready": 0, "delayed": 1}
    assert {k: v for k, v in db.queue("reader").stats().items() if k in expected} == expected
    db.queue("reader").browse()  # pulled now: counted the same
    assert {k: v for k, v in db.queue("reader").stats().items() if k in expected} == expected
