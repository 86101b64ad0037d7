"""kill -9 of ``sluice run`` at random moments, again and again (issue 20's reliability).

Every message is processed exactly once (its actions are there once), echo timers
fire once and not early, a crash causes no error message, and retention never
removes a message a live slice holds. The rules engine holds nothing across
transactions, so the next ``sluice run`` takes the work over at once: no lease
runs out first.
"""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice.engine.reading import BrowseState
from sluice.message import Message

pytestmark = pytest.mark.slow

APP = """
SET ERRORQUEUE errs;
CREATE QUEUE errs;
-- The engine takes a queue when those of higher priority have no work: with the
-- smallest flow first, every run works on each of the three.
CREATE QUEUE parts PRIORITY 2 RETENTION 0 s;
CREATE QUEUE timers KIND echo PRIORITY 1;
CREATE QUEUE orders;
CREATE QUEUE billing;
CREATE QUEUE shipping;
CREATE QUEUE due;
CREATE QUEUE assembled;
CREATE PROPERTY seq AS integer QUEUE billing, shipping VALUE body.seq;
CREATE PROPERTY echo_target AS text QUEUE timers;
CREATE PROPERTY echo_after AS real QUEUE timers;
CREATE PROPERTY orderID AS text QUEUE parts VALUE body.order;
CREATE SLICING byOrder ON orderID;

-- one in, three out; the third comes back through the echo queue after body.after s
CREATE RULE route FOR orders
  IF true THEN
    ENQUEUE json_object('seq', body.seq) INTO billing,
    ENQUEUE json_object('seq', body.seq) INTO shipping,
    ENQUEUE json_object('seq', body.seq) INTO timers
      WITH echo_target = 'due', echo_after = body.after;

-- the join: an order's three parts make one assembled message, then the slice resets
-- and retention removes the parts
CREATE RULE assemble FOR byOrder
  IF (SELECT count(*) FROM slice() AS s) = 3 THEN
    ENQUEUE json_object('order', slicekey(), 'sum', (SELECT sum(s.body.n) FROM slice() AS s))
      INTO assembled,
    RESET;
"""

ROUNDS = 16
"""Runs killed; a last one then finishes the work."""

FIRST_ORDERS, WAVE_ORDERS = 600, 40
PART_ORDERS, HELD_ORDERS, FIRST_PARTS = 300, 30, 300
FIRST_TICKS, WAVE_TICKS = 60, 10
BATCHES = (1, 7, 64, 256)
"""``sluice run --batch``: one message per transaction up to the default."""

TAKEOVER = 10.0
"""Seconds a new run may take to commit its first work: far below the 30 s lease a
run would wait out if it had to recover a killed one's claims first."""

WATCHED = ["billing", "assembled", "due", "parts", "orders", "timers"]
EVERYTHING = 100_000


@dataclass
class Load:
    """What the test puts and what it expects back, decided by one seed."""

    rng: random.Random
    after: dict[int, float] = field(default_factory=dict)
    """seq -> echo_after of the order's timer."""
    ticks: dict[int, tuple[float, float]] = field(default_factory=dict)
    """tick -> (put no earlier than, echo_after) of the timers the test puts itself."""
    parts: list[dict[str, Any]] = field(default_factory=list)
    """The parts not yet put, in the order they will be: orders' parts interleaved."""
    third: list[dict[str, Any]] = field(default_factory=list)
    """The held orders' last parts, put at the end: until then their slices are live."""
    sums: dict[str, int] = field(default_factory=dict)
    put_parts: set[tuple[str, int]] = field(default_factory=set)

    @classmethod
    def make(cls, seed: int) -> Load:
        load = cls(random.Random(seed))
        held = {f"o{k}" for k in load.rng.sample(range(PART_ORDERS), HELD_ORDERS)}
        for k in range(PART_ORDERS):
            order = f"o{k}"
            parts: list[dict[str, Any]] = [{"order": order, "n": 10 * k + i} for i in range(1, 4)]
            load.sums[order] = sum(p["n"] for p in parts)
            if order in held:
                load.third.append(parts.pop())
            load.parts.extend(parts)
        load.rng.shuffle(load.parts)
        return load

    @property
    def held(self) -> set[str]:
        return {p["order"] for p in self.third}

    def put(self, db: sluice.Database, orders: int, parts: int, ticks: int) -> None:
        first = len(self.after)
        for seq in range(first, first + orders):
            self.after[seq] = round(self.rng.uniform(0.2, 1.0), 3)
        db.queue("orders").put_many(
            [{"seq": seq, "after": self.after[seq]} for seq in range(first, first + orders)]
        )
        self.put_parts_now(db, self.parts[:parts])
        del self.parts[:parts]
        first = len(self.ticks)
        since = time.time()
        with db.transaction() as tx:
            for tick in range(first, first + ticks):
                after = round(self.rng.uniform(0.2, 1.0), 3)
                self.ticks[tick] = (since, after)
                properties = {"echo_target": "due", "echo_after": after}
                tx.enqueue("timers", {"tick": tick}, properties=properties)

    def put_parts_now(self, db: sluice.Database, parts: list[dict[str, Any]]) -> None:
        db.queue("parts").put_many(parts)
        self.put_parts.update((p["order"], p["n"]) for p in parts)


class Run:
    """One ``sluice run`` process; a thread reads its stderr so the test can wait for it."""

    def __init__(self, rules: Path, url: str, batch: int) -> None:
        # faulthandler: a run that does not stop is made to show where it hangs (SIGABRT).
        command = [sys.executable, "-X", "faulthandler", "-m", "sluice.cli", "run", str(rules)]
        self.process = subprocess.Popen(
            [*command, "--db", url, "--batch", str(batch)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.started = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        with self.process.stderr:
            for line in self.process.stderr:
                self.lines.append(line.rstrip("\n"))
                if line.startswith("sluice run: running"):
                    self.started.set()

    def wait_started(self) -> None:
        if not self.started.wait(60):
            self.kill()
            pytest.fail(f"sluice run did not start: {self.lines}")

    def alive_for(self, seconds: float) -> None:
        """Wait ``seconds``; a run that ends meanwhile by itself failed."""
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return
        self._reader.join()
        pytest.fail(f"sluice run ended by itself ({self.process.returncode}): {self.lines}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self._reader.join()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            self.process.wait()
            self._reader.join()
            pytest.fail("sluice run did not stop on SIGTERM:\n" + "\n".join(self.lines))
        self._reader.join()
        assert self.process.returncode == 0, self.lines
        assert self.lines[-1].startswith("sluice run: stopped after"), self.lines

    def assert_quiet(self) -> None:
        """Its words are its own start, progress and stop lines and INFO logs (sluice run
        logs at INFO, such as the sessions it rolled back): no warning, no traceback."""
        unexpected = [
            line
            for line in self.lines
            if not line.startswith("sluice run: ") and not _INFO.match(line)
        ]
        assert not unexpected, "\n".join(self.lines)


_INFO = re.compile(r"^\d\d:\d\d:\d\d INFO    sluice[.\w]*: ")


def _until(db: sluice.Database, what: str, condition: Callable[[], bool], timeout: float) -> float:
    """Wait until ``condition`` holds; return the seconds it took."""
    wakeups = db.context.wakeups
    began = time.monotonic()
    while True:
        token = wakeups.token()
        if condition():
            return time.monotonic() - began
        remaining = began + timeout - time.monotonic()
        if remaining <= 0:
            counts = {name: db.queue(name).stats() for name in WATCHED}
            pytest.fail(f"no {what} within {timeout} s; the queues hold {counts}")
        # Another process's commits wake this, but not every backend tells of
        # removals, and echo timers fall due without a commit: look again soon.
        wakeups.wait(token, min(remaining, 0.1), WATCHED)


def _count(db: sluice.Database, name: str, *states: BrowseState) -> int:
    """How many messages a queue has in ``states``, read without a write transaction
    (``stats()`` on SQLite takes one, and would slow the run it watches)."""
    return sum(len(db.queue(name).browse(EVERYTHING, state=state)) for state in states)


def _ready(db: sluice.Database) -> int:
    """Messages ready for the rules: every batch a run commits takes some."""
    return sum(_count(db, name, "ready") for name in ("parts", "timers", "orders"))


def _taken(db: sluice.Database, before: int) -> Callable[[], bool]:
    return lambda: _ready(db) < before


WAITING: tuple[BrowseState, ...] = ("delayed", "ready")
"""Not processed yet. Delayed first: a delayed message may become ready meanwhile (its
time came), never the other way, so none falls between the two looks."""
KEPT: tuple[BrowseState, ...] = (*WAITING, "done")
"""Every message a queue has: processed ones are kept until retention removes them."""


def _messages(db: sluice.Database, name: str, states: tuple[BrowseState, ...]) -> list[Message]:
    found: dict[str, Message] = {}  # by id: a message seen twice (delayed, then ready) once
    for state in states:
        found |= {m.id: m for m in db.queue(name).browse(EVERYTHING, state=state)}
    return list(found.values())


def _bodies(db: sluice.Database, name: str, states: tuple[BrowseState, ...]) -> list[Any]:
    return [m.body for m in _messages(db, name, states)]


def _once(values: list[Any], what: str) -> set[Any]:
    doubled = sorted(v for v, n in Counter(values).items() if n > 1)
    assert not doubled, f"{what} more than once: {doubled[:20]}"
    return set(values)


def _check_consistent(db: sluice.Database, load: Load) -> None:
    """What must hold whenever no run is at work: each message all done or not begun."""
    waiting = {b["seq"] for b in _bodies(db, "orders", WAITING)}
    billed = _once([b["seq"] for b in _bodies(db, "billing", KEPT)], "billing of an order")
    shipped = _once([b["seq"] for b in _bodies(db, "shipping", KEPT)], "shipping of an order")
    assert billed == shipped, "an order's actions were done in part"
    assert billed.isdisjoint(waiting), "an order was processed and is still to be processed"
    assert billed | waiting == set(load.after), "an order was lost"
    timers = _bodies(db, "timers", WAITING)
    fired = _bodies(db, "due", KEPT)
    for key, expected in (("seq", billed), ("tick", set(load.ticks))):
        pending = _once([b[key] for b in timers if key in b], f"timer {key}")
        done = _once([b[key] for b in fired if key in b], f"echo of {key}")
        assert pending.isdisjoint(done), f"an echo of {key} fired and is still pending"
        assert pending | done == expected, f"an echo of {key} was lost"
    assembled = _once([b["order"] for b in _bodies(db, "assembled", KEPT)], "assembled order")
    assert assembled.isdisjoint(load.held), "an order was assembled without its third part"
    present = {(b["order"], b["n"]) for b in _bodies(db, "parts", KEPT)}
    removed = load.put_parts - present
    early = sorted({order for order, _ in removed} - assembled)
    assert not early, f"retention removed parts of orders still in a live slice: {early[:20]}"
    assert _bodies(db, "errs", KEPT) == []
    assert _bodies(db, "sluice_rule_errors", KEPT) == []


def _drained(db: sluice.Database, load: Load, assembled: int, kept: int) -> Callable[[], bool]:
    """Everything processed, every timer fired, ``assembled`` orders assembled and every
    part no slice holds removed (``kept`` parts are left)."""

    def condition() -> bool:
        return (
            _count(db, "orders", "ready", "delayed", "done") == 0
            and _count(db, "timers", "ready", "delayed", "done") == 0
            and _count(db, "parts", "ready", "delayed") == 0
            and _count(db, "billing", "ready") == len(load.after)
            and _count(db, "due", "ready") == len(load.after) + len(load.ticks)
            and _count(db, "assembled", "ready") == assembled
            and _count(db, "parts", "done") == kept
        )

    return condition


def test_kill_9_of_sluice_run_processes_every_message_exactly_once(
    shared_url: str, tmp_path: Path
) -> None:
    url = shared_url
    rules = tmp_path / "app.rules"
    rules.write_text(APP, "utf-8")
    load = Load.make(seed=20)
    rng = load.rng
    takeovers: list[float] = []
    began = time.monotonic()
    with sluice.connect(url) as db:
        db.apply(APP)
        load.put(db, FIRST_ORDERS, FIRST_PARTS, FIRST_TICKS)
        wave = -(-len(load.parts) // ROUNDS)
        for _ in range(ROUNDS):
            load.put(db, WAVE_ORDERS, wave, WAVE_TICKS)
            before = _ready(db)
            run = Run(rules, url, rng.choice(BATCHES))
            try:
                moment = rng.random()
                if moment < 0.2:  # anywhere from the start: import, connect, apply
                    run.alive_for(rng.uniform(0.0, 1.5))
                elif moment < 0.6:  # anywhere in its work, or once it is idle
                    run.wait_started()
                    run.alive_for(rng.uniform(0.0, 1.0))
                else:  # right after its first batch: the next one is under way
                    run.wait_started()
                    taken = _taken(db, before)
                    takeovers.append(_until(db, "a new run's first batch", taken, TAKEOVER))
                    run.alive_for(rng.uniform(0.0, 0.05))
            finally:
                run.kill()
            assert run.process.returncode == -signal.SIGKILL, run.lines
            run.assert_quiet()
            _check_consistent(db, load)
        assert not load.parts
        assert takeovers, "no run was killed right after its first batch"
        killed = time.monotonic() - began

        run = Run(rules, url, 256)
        try:
            run.wait_started()
            drained = _drained(db, load, PART_ORDERS - HELD_ORDERS, 2 * HELD_ORDERS)
            _until(db, "end of the work", drained, 60)
            # The held orders' slices are live: their parts stay, whatever retention says.
            _check_consistent(db, load)
            load.put_parts_now(db, load.third)
            load.third.clear()
            _until(db, "assembly of the held orders", _drained(db, load, PART_ORDERS, 0), 60)
        except BaseException:
            run.kill()
            _check_consistent(db, load)  # a precise account of what went wrong, if it can
            raise
        run.stop()
        run.assert_quiet()

        _check_consistent(db, load)
        _check_outcome(db, load)
    print(
        f"\n{url.partition(':')[0]}: {ROUNDS} kills in {killed:.1f} s, "
        f"{time.monotonic() - began:.1f} s in all; takeover after a kill "
        f"{min(takeovers):.3f}-{max(takeovers):.3f} s ({len(takeovers)} measured)"
    )


def _check_outcome(db: sluice.Database, load: Load) -> None:
    """All processed once: each output once, each timer fired once and not early."""
    orders = len(load.after)
    billing = {m.body["seq"]: m for m in _messages(db, "billing", KEPT)}
    assert sorted(billing) == list(range(orders))
    assert sorted(b["seq"] for b in _bodies(db, "shipping", KEPT)) == list(range(orders))
    assert all(m.body == {"seq": seq} for seq, m in billing.items())
    fired = _messages(db, "due", KEPT)
    assert len(fired) == orders + len(load.ticks)
    for m in fired:
        body = m.body
        if "seq" in body:
            # The timer was made with the billing message, in the same transaction.
            seq = body["seq"]
            assert m.enqueued >= billing[seq].enqueued + load.after[seq] - 1e-6, m
        else:
            since, after = load.ticks[body["tick"]]
            assert m.enqueued >= since + after - 1e-3, m
    assembled = {b["order"]: b["sum"] for b in _bodies(db, "assembled", KEPT)}
    assert assembled == load.sums
    for name in ("orders", "parts", "timers", "errs", "sluice_rule_errors"):
        assert _messages(db, name, KEPT) == [], name
