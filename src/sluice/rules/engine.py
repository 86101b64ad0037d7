"""``db.rules``: apply a rules application, and run it (docs/rules.md).

The application lives in the database: ``apply`` checks a file against what is
applied already, creates and changes the queues and properties it declares and
stores the result with a new version; every engine that runs the rules (this
process's or ``sluice run`` elsewhere) sees the new version before its next batch
and goes on with it, so messages not yet processed get the new rules.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sluice.backends.records import StoredProperty
from sluice.catalog import FOREVER
from sluice.engine.database import Engine
from sluice.engine.retention import remove_kept
from sluice.errors import (
    ConfigurationError,
    MissingDependency,
    QueueInUse,
    RuleDefinitionError,
    SluiceError,
    StorageError,
)
from sluice.rules import codec
from sluice.rules.arrival import Group, arrival_groups
from sluice.rules.check import apply_statements
from sluice.rules.fast import ActionKey, FastInsert, build_fast
from sluice.rules.language import parse_statements
from sluice.rules.model import Application, QueueDef
from sluice.rules.needs import require_extras
from sluice.rules.outcome import BatchResult, StalePlan
from sluice.rules.plan import SYSTEM_ERRORS, QueuePlan, compile_application
from sluice.rules.runner import process_batch
from sluice.rules.turns import Retake, Turns

__all__ = ["Rules", "RunStats"]

log = logging.getLogger(__name__)

BATCH = 256
"""Messages per transaction by default: enough to pay for the commit many times over."""

_RELOAD_EVERY = 0.5
"""Seconds between looks at the applied version while running."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    """The applied application as this engine compiled it: replaced whole, so that a
    worker's batch never mixes two versions."""

    version: int = -1
    app: Application = field(default_factory=Application)
    plans: tuple[QueuePlan, ...] = ()
    groups: tuple[Group, ...] = ()
    """The plans as batches take them (rules/arrival.py), highest PRIORITY first."""
    fast: Mapping[str, Mapping[ActionKey, FastInsert]] = field(default_factory=dict)
    queue_ids: Mapping[str, int] = field(default_factory=dict)
    missing: str | None = None
    """Why this process cannot run it (an extra not installed): raised before any batch."""
    traced: bool = False
    """Compiled with telemetry on: made messages inherit their triggers' trace context."""


@dataclass(slots=True)
class RunStats:
    """What a run did."""

    processed: int = 0
    """Messages processed (error messages made for them included)."""
    errors: int = 0
    """Messages whose processing failed: each made an error message (docs/rules.md)."""
    produced: int = 0
    """Messages the rules enqueued, error messages included."""
    removed: int = 0
    batches: int = 0

    def add(self, result: BatchResult) -> None:
        self.processed += result.processed
        self.errors += result.errors
        self.produced += sum(result.produced.values())
        self.removed += result.removed
        self.batches += 1


OnBatch = Callable[[str, BatchResult], None]
"""Told of each committed batch: its queue (an arrival group's queues joined by '+') and
what it did."""


def _key(group: Group) -> str:
    """A batch's name: its queue's, or an arrival group's queues' joined by '+'."""
    return "+".join(plan.name for plan in group)


def _retention(seconds: float) -> float | None:
    """A rules queue's RETENTION as its queue's: processed messages are kept (done) at
    least this long, and longer while a slice holds them; 0: removed at once."""
    if math.isinf(seconds):
        return FOREVER
    return seconds or None


class Rules:
    """The rules of one Database: ``apply`` a definition, ``run`` it."""

    def __init__(
        self, engine: Engine, *, check_gateway: Callable[[QueueDef], None] | None = None
    ) -> None:
        """``check_gateway``: raises ConfigurationError for a KIND gateway queue whose
        transport cannot work as set (the Database gives sluice.gateways' check; without
        one, an application with gateway queues is refused)."""
        self._engine = engine
        self._check_gateway = check_gateway
        self._context = engine.context
        self._lock = threading.RLock()
        self._compiled = _Compiled()
        self._turns: dict[str, Turns] = {}
        """Per queue, shared by this engine's workers (see turns.py)."""
        self._turn = 0
        self._counting = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.stats = RunStats()
        """What the run going on (or the last one) has done so far, counted as each batch
        commits: read it from a timer for progress (``processed``, ``errors``)."""

    # --- the application --------------------------------------------------------------
    @property
    def application(self) -> Application:
        """The applied application (as of the last look at the database)."""
        self.reload()
        return self._compiled.app

    def apply(
        self, text: str, *, check: Callable[[Application], None] | None = None
    ) -> Application:
        """Apply a definition: the statements of ``text`` on top of what is applied.

        Idempotent: applying the same text again changes nothing. Every static
        mistake raises RuleDefinitionError with its line; a change that would break
        what runs (a property's type changed while its queues keep messages) raises
        ConfigurationError. Nothing is changed then. ``check``: what another engine
        that is to run the result refuses (Spark's: sluice.spark.rules), raising
        before anything changes.
        """
        backend = self._engine.backend
        with self._lock:
            version, current = self._stored()
            app = apply_statements(current, parse_statements(text))
            self._check_data(current, app)
            self._check_gateways(app)
            # Compiled before anything changes: a mistake only a compiler finds is refused
            # here, not at the first message.
            ids = dict.fromkeys(app.queues, 0)
            require_extras(app, compile_application(app, backend, ids), self._context.types)
            if check is not None:
                check(app)
            self._make_queues(current, app)
            self._store_gateways(current, app)
            self._store_properties(current, app)
            for name in set(current.slicings) - set(app.slicings):
                backend.rules_write("rules_forget_slicing", {"slicing": name})
            text_now = codec.encode(app)
            if version == 0 or text_now != codec.encode(current):
                # An unchanged application keeps its version: no engine recompiles.
                params = {"version": version + 1, "application": text_now,
                          "now": self._context.clock.now()}  # fmt: skip
                backend.rules_write("rules_catalog_write", params)
            self._compiled = _Compiled()  # compile anew at the next look
        return app

    def _stored(self) -> tuple[int, Application]:
        rows = self._engine.backend.rules_read("rules_catalog_read", {})
        if not rows:
            return 0, Application()
        version, text = rows[0]
        return int(version), codec.decode(text)

    def _check_data(self, current: Application, app: Application) -> None:
        """Refuse a property's change of type while a queue of it keeps messages."""
        backend = self._engine.backend
        for name, new in app.properties.items():
            old = current.properties.get(name)
            if old is None or old.type == new.type:
                continue
            for queue in sorted(set(old.values) & set(new.values)):
                kept = backend.rules_read("rules_kept_count", {"queue": queue})[0][0]
                if kept:
                    raise ConfigurationError(
                        f"line {new.line}: property {name!r} cannot change from {old.type} "
                        f"to {new.type}: queue {queue!r} keeps {kept} messages that have it"
                    )

    def _check_gateways(self, app: Application) -> None:
        for queue in app.queues.values():
            if queue.gateway is None:
                continue
            if self._check_gateway is None:
                raise ConfigurationError(
                    f"line {queue.line}: gateway queue {queue.name!r} needs a Database "
                    "that runs gateways (sluice.connect gives one)"
                )
            try:
                self._check_gateway(queue)
            except ConfigurationError as exc:
                raise RuleDefinitionError(str(exc), line=queue.line) from None

    def _store_gateways(self, current: Application, app: Application) -> None:
        backend = self._engine.backend
        for name, old in current.queues.items():
            new = app.queues.get(name)
            if old.gateway is not None and (new is None or new.gateway is None):
                backend.gateways_drop(name)
        for queue in app.queues.values():
            g = queue.gateway
            if g is not None:
                settings = json.dumps(dict(g.settings), sort_keys=True)
                backend.gateways_put(queue.name, g.direction, g.transport, settings,
                                     self._context.clock.now())  # fmt: skip

    def _make_queues(self, current: Application, app: Application) -> None:
        engine = self._engine
        for name in sorted(set(current.queues) - set(app.queues)):
            try:
                engine.drop_queue(name)
            except QueueInUse as exc:
                raise ConfigurationError(f"queue {name!r} cannot be dropped: {exc}") from None
        for queue in [*app.queues.values(), QueueDef(SYSTEM_ERRORS, 0)]:
            spec = engine.backend.get_queue(queue.name)
            retention = _retention(queue.retention)
            if spec is None:
                engine.create_queue(
                    queue.name, durability=queue.mode, types=queue.types, retention=retention
                )
            elif queue.name != SYSTEM_ERRORS and (
                tuple(spec.types) != tuple(queue.types) or spec.retention != retention
            ):
                engine.alter_queue(queue.name, types=queue.types, retention=retention)

    def _store_properties(self, current: Application, app: Application) -> None:
        backend = self._engine.backend
        for queue in sorted(app.queues):
            stored = [
                StoredProperty(name, p.type, None if p.values[queue] is None
                               else p.values[queue].text, p.fixed)  # type: ignore[union-attr]
                for name, p in sorted(app.properties.items())
                if queue in p.values
            ]  # fmt: skip
            if stored != backend.stored_properties(queue):
                backend.set_stored_properties(queue, stored)
                self._context.forget(queue)

    def reload(self) -> bool:
        """Read the applied version; compile it if it changed. True if it did."""
        backend = self._engine.backend
        latest = backend.rules_read("rules_version", {})  # cheap: the text only if it changed
        traced = self._context.observer is not None
        compiled = self._compiled
        if (int(latest[0][0]) if latest else 0) == compiled.version and traced == compiled.traced:
            return False
        with self._lock:
            rows = backend.rules_read("rules_catalog_read", {})
            version = int(rows[0][0]) if rows else 0
            if version == self._compiled.version and traced == self._compiled.traced:
                return False  # another worker compiled it meanwhile
            app = codec.decode(rows[0][1]) if rows else Application()
            ids = {str(name): int(ref) for name, ref in backend.rules_read("rules_queue_ids", {})}
            plans = compile_application(app, backend, ids)
            fast = {p.name: build_fast(app, backend, p, traced=traced) for p in plans}
            groups = tuple(arrival_groups(plans))
            for group in groups:
                self._turns.setdefault(_key(group), Turns())
            try:
                require_extras(app, plans, self._context.types)
                missing = None
            except MissingDependency as exc:  # raised by the next batch, not by every look
                missing = str(exc)
            self._compiled = _Compiled(
                version, app, tuple(plans), groups, fast, ids, missing, traced
            )
        return True

    # --- running -----------------------------------------------------------------------
    def run_until_idle(self, *, batch: int = BATCH, workers: int = 1) -> RunStats:
        """Process every due message, then remove what nobody needs; return what was done.

        Messages that rules produce on the way are processed too. Echo messages not
        yet due by the engine clock wait (move a ManualClock and call again).
        ``workers``: batches processed at once (see ``run``).
        """
        self.stats = stats = RunStats()
        self.reload()

        def drain() -> None:
            idle: set[str] = set()
            while self._round(batch, idle, stats):
                pass

        self._together(workers, lambda _: drain())
        stats.removed += self.remove()
        return stats

    @staticmethod
    def _together(
        workers: int, work: Callable[[int], None], halt: Callable[[], None] | None = None
    ) -> None:
        """``work(n)`` in ``workers`` threads, the first this one; the first error raised.
        ``halt``: what makes the others end when one fails (they would run on)."""
        if workers < 1:
            raise ConfigurationError(f"workers must be at least 1, not {workers}")
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            try:
                work(n)
            except BaseException as exc:  # told to the caller below
                errors.append(exc)
                if halt is not None:
                    halt()

        threads = [
            threading.Thread(target=worker, args=(n,), name=f"sluice-rules-{n}", daemon=True)
            for n in range(1, workers)
        ]
        for thread in threads:
            thread.start()
        worker(0)
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def _round(
        self, batch: int, idle: set[str], stats: RunStats, on_batch: OnBatch | None = None
    ) -> bool:
        """One batch of the highest-priority queue (or arrival group: rules/arrival.py)
        with work; False if none had any.

        Queues of one priority take turns (the one after the last served goes first),
        so a busy queue does not starve another of its priority. ``idle``: the keys of
        groups found without work, until a batch produces into one of their queues.
        """
        if (self._context.observer is not None) != self._compiled.traced:
            self.reload()  # telemetry turned on or off: compiled again to match
        compiled = self._compiled
        if compiled.missing is not None:
            raise MissingDependency(compiled.missing)
        groups = compiled.groups
        turn = self._turn % len(groups) if groups else 0
        order = sorted(
            range(len(groups)),
            key=lambda n: (-groups[n][0].definition.priority, (n - turn) % len(groups)),
        )
        for n in order:
            group = groups[n]
            key = _key(group)
            if key in idle:
                continue
            self._turn = n + 1
            try:
                result = process_batch(
                    self._context,
                    compiled.app,
                    group,
                    batch,
                    compiled.version,
                    compiled.fast,
                    compiled.queue_ids,
                    self._turns[key],
                    traced=compiled.traced,
                )
            except StalePlan:
                self.reload()
                idle.clear()
                return True  # from the top, with the new rules
            except Retake:
                return True  # an earlier batch was rolled back: its messages go first
            with self._counting:
                stats.add(result)
            if on_batch is not None and (result.processed or result.deferred):
                on_batch(key, result)
            if result.processed + result.deferred < batch:
                idle.add(key)
            idle.difference_update(
                _key(g) for g in groups if any(p.name in result.produced for p in g)
            )
            if result.processed:
                return True  # from the top again: higher priorities first
        return False

    def remove(self) -> int:
        """Remove processed messages past retention that no live slice holds (bounded).

        The engine's own removal of kept messages (which every session's upkeep runs),
        run now: a rules queue's RETENTION is its queue's retention.
        """
        return remove_kept(self._engine.backend)

    def run(self, *, batch: int = BATCH, stop: threading.Event | None = None,
            poll: float = 1.0, on_batch: OnBatch | None = None,
            workers: int = 1) -> RunStats:  # fmt: skip
        """Run until ``stop`` is set (or ``stop()`` is called): rules, echo timers and
        removal, waiting for news between batches. ``on_batch(queue, result)`` is called
        after each batch that did something has committed (monitoring: it must be quick,
        and what it raises stops the run, every worker, and sets ``stop``; with several
        workers it is called from each one's thread).

        ``workers``: threads processing batches at once. A queue's batches still write in
        the order they were taken (rules/turns.py), so what one worker overlaps with the
        batch before it is taking and evaluating its own: worth it on PostgreSQL with
        cores to spare; SQLite's writers are serial anyway.
        """
        stop = stop or self._stop
        self.stats = stats = RunStats()
        wakeups = self._context.wakeups

        def halt() -> None:  # one worker failed: the run stops, as it does with one worker
            stop.set()
            wakeups.notify()

        self._together(workers, lambda n: self._serve(batch, stop, poll, on_batch, stats, n), halt)
        return stats

    def _serve(  # noqa: PLR0917  (one worker of run)
        self,
        batch: int,
        stop: threading.Event,
        poll: float,
        on_batch: OnBatch | None,
        stats: RunStats,
        worker: int,
    ) -> None:
        """One worker of ``run``; the first (0) also reloads and removes."""
        wakeups = self._context.wakeups
        idle: set[str] = set()
        looked = 0.0
        while not stop.is_set():
            if worker == 0 and time.monotonic() - looked > _RELOAD_EVERY:
                looked = time.monotonic()
                try:
                    if self.reload():
                        idle.clear()
                    removed = self.remove()
                    with self._counting:
                        stats.removed += removed
                except (SluiceError, StorageError) as exc:
                    log.warning("rules: reload or removal failed, retrying: %s", exc)
            token = wakeups.token()
            try:
                worked = self._round(batch, idle, stats, on_batch)
            except MissingDependency:
                raise  # this process cannot run the rules: trying again would not help
            except (SluiceError, StorageError) as exc:
                log.warning("rules: a batch failed and was rolled back, retrying: %s", exc)
                stop.wait(0.2)
                continue
            if worked:
                continue
            plans = self._compiled.plans
            timeout = min(poll, self._next_due(plans))
            wakeups.wait(token, timeout, [p.name for p in plans] or ["-"])
            idle.clear()

    def _next_due(self, plans: Sequence[QueuePlan]) -> float:
        """Real seconds until the next delayed message of a processed queue is due."""
        clock = self._context.clock
        best = float("inf")
        for plan in plans:
            due = self._engine.backend.next_due(plan.name)
            if due is not None:
                best = min(best, clock.real_seconds(max(due - clock.now(), 0.0)))
        return best

    def start(
        self, *, batch: int = BATCH, on_batch: OnBatch | None = None, workers: int = 1
    ) -> None:
        """Run in the background until ``stop()`` (``on_batch``, ``workers``: see ``run``)."""
        if self._thread is not None and self._thread.is_alive():
            raise ConfigurationError("the rules engine runs already; stop() it first")
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.run,
            kwargs={"batch": batch, "on_batch": on_batch, "workers": workers},
            name="sluice-rules",
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the background run after its current batch, and wait for it."""
        self._stop.set()
        self._context.wakeups.notify()  # out of its wait now
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
