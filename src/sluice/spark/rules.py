"""A rules application on Spark Structured Streaming: the same definition, set at a
time, with the local engine's results (docs/rules.md, "On Spark").

Every queue the rules process is read by one stream (``sluice_rules``, by position).
Each micro-batch is processed queue by queue (an arrival group's queues together, in
arrival order across them: rules/arrival.py), highest PRIORITY first: Spark SQL
evaluates the queue's rules over the batch's messages (the plan's columns compiled for
Spark, over ``queue('q')`` snapshots and the slices' members), and the local engine's
own batch logic (sluice.rules.runner) decides the branches, builds and checks the
messages, joins and resets slices and makes error messages, in one database
transaction per queue that also records the micro-batch, as a sink records its batch.
So a message is processed exactly once: a replayed batch finds the queues it
recorded done, and reads and processes the rest as it did the first time, at the same
``now`` (the time travels in the offset). Outputs into queues the rules process are
read by the next micro-batch.

A stop (``RulesRun.stop``; SIGTERM or Ctrl-C for ``sluice run``) waits for the
transaction at hand and begins no other: the parts of the micro-batch not processed
keep their messages unprocessed, and the source reads every unprocessed message up to
its position, so the next run's first micro-batch takes them. Spark's query is stopped
only after that, as stopping it cancels the jobs of the batch it interrupts; a Spark
failure while stopping rolls its transaction back instead of making error messages.

Slices are read as the database holds them inside the batch's transaction: for each
wave (plan.py), the members of the slices its messages are in, after the waves before
it joined and reset theirs, become the view ``slice()`` reads; the same snapshot the
local engine's SELECT would see. ``queue('q')`` reads a snapshot of q taken before its
queue's transaction (no rule of that queue writes q: such a plan is refused).

What cannot run: a queue whose rules must run a message at a time (a rule reading
``queue('q')`` that the queue's rules write into, or ``RESET ... KEY``). ``check``
refuses it when applying, naming the rule and the construct.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import sluice
from sluice.backends.base import RuleUnit
from sluice.clock import ManualClock
from sluice.database import Database
from sluice.errors import ConfigurationError, StorageError
from sluice.expr.spark_rules import SparkRulesCompiler, register_functions
from sluice.expr.sql import Source
from sluice.rules import codec
from sluice.rules.arrival import arrival_groups
from sluice.rules.check import rules_of
from sluice.rules.engine import RunStats
from sluice.rules.fast import ActionKey, FastInsert, build_fast, made_bodies
from sluice.rules.model import Application, Reset
from sluice.rules.needs import require_extras
from sluice.rules.plan import SYSTEM_ERRORS, PlannedEnqueue, QueuePlan, compile_application
from sluice.rules.runner import StalePlan, process_given
from sluice.spark.options import absolute_url
from sluice.spark.rules_source import KEPT_SCHEMA, RulesDataSource, message_values
from sluice.spark.rules_sql import (
    BATCH_VIEW,
    ROWS_SCHEMA,
    SLICE_ARROW,
    SLICE_SCHEMA,
    SLICE_VIEW,
    SparkRuleSQL,
    queue_view,
)
from sluice.spark.stopping import until_idle

__all__ = ["RulesRun", "check", "run_rules", "start_rules"]


def check(app: Application) -> None:
    """ConfigurationError naming what of ``app`` cannot run on Spark (nothing if all can)."""
    ids = dict.fromkeys(app.queues, 0)
    refused = [_refusal(app, plan) for plan in compile_application(app, SparkRuleSQL(), ids)]
    found = [r for r in refused if r]
    if found:
        raise ConfigurationError(
            "these rules cannot run on Spark (they must see one message's actions before "
            "the next message of their queue is evaluated; run them with the local "
            "engine): " + "; ".join(found)
        )


def _refusal(app: Application, plan: QueuePlan) -> str | None:
    if not plan.sequential or plan.waves is not None:
        return None
    written = {
        a.queue
        for r in plan.rules
        for b in r.branches
        for a in b.actions
        if isinstance(a, PlannedEnqueue)
    }
    written |= {q for q in (plan.definition.error_queue, app.error_queue, SYSTEM_ERRORS) if q}
    written |= {r.rule.error_queue for r in plan.rules if r.rule.error_queue}
    reasons = []
    for rule in rules_of(app, plan.name):
        for branch in rule.branches:
            for action in branch.actions:
                if isinstance(action, Reset) and action.key is not None:
                    reasons.append(
                        f"line {action.key.line}: rule {rule.name!r}: RESET "
                        f"{action.slicing or rule.target} KEY ..."
                    )
    for queue in sorted(plan.reads & written):
        reasons.append(
            f"queue {plan.name!r}: its rules read queue('{queue}') and write into {queue!r}"
        )
    return "; ".join(reasons) or f"queue {plan.name!r}: its rules run a message at a time"


@dataclass(frozen=True, slots=True)
class _Compiled:
    version: int
    app: Application
    plans: tuple[QueuePlan, ...]
    """The database's plans, highest PRIORITY first (what the runner executes)."""
    spark: Mapping[str, QueuePlan]
    """The same plans with their columns in Spark SQL, by queue."""
    evaluations: Mapping[tuple[str, frozenset[int]], str]
    """Each Spark plan's evaluation SELECT, by queue and the columns it omits: all
    columns, and (where the plan has SQL enqueues) those the runner asks for then."""
    fast: Mapping[str, Mapping[ActionKey, FastInsert]]
    """Each plan's SQL enqueues (rules.fast), by queue: the messages built by the database."""
    queue_ids: Mapping[str, int]


def _compile(db: Database) -> _Compiled:
    backend = db.backend
    rows = backend.rules_read("rules_catalog_read", {})
    version = int(rows[0][0]) if rows else 0
    app = codec.decode(rows[0][1]) if rows else Application()
    check(app)
    ids = {str(n): int(i) for n, i in backend.rules_read("rules_queue_ids", {})}
    plans = compile_application(app, backend, ids)
    require_extras(app, plans, db.context.types)
    compilers = SparkRuleSQL()
    spark = {p.name: p for p in compile_application(app, compilers, ids)}
    fast = {p.name: build_fast(app, backend, p) for p in plans}
    for plan in plans:  # the SQL enqueues' checks: columns of the plan Spark computes too
        _add_checks(spark[plan.name], fast[plan.name], len(plan.columns))
    evaluations: dict[tuple[str, frozenset[int]], str] = {}
    for plan in plans:
        lean = made_bodies(plan, fast[plan.name])
        for omit in {frozenset(), lean}:
            evaluations[plan.name, omit] = compilers.evaluation(spark[plan.name], omit)
    return _Compiled(version, app, tuple(plans), spark, evaluations, fast, ids)


def _add_checks(plan: QueuePlan, fast: Mapping[ActionKey, FastInsert], width: int) -> None:
    """The columns build_fast added to the database's plan, compiled for Spark at the
    same numbers (``width``: how many columns the database's plan has now)."""
    added = [
        (n, node) for f in fast.values() for n, node in zip(f.checks, f.check_nodes, strict=True)
    ]
    if not added:
        return
    compiler = SparkRulesCompiler(Source(alias="m"), prefix="fc_")
    plan.columns.extend(["NULL"] * (width - len(plan.columns)))
    for n, node in added:
        plan.columns[n] = compiler.compile(node)
    plan.params.update(compiler.params)


@dataclass(slots=True)
class _Engine:
    """The driver's side of the query: one micro-batch at a time (foreachBatch)."""

    spark: Any
    db: Database
    url: str
    name: str
    compiled: _Compiled
    stats: RunStats = field(default_factory=RunStats)
    session: Any = None
    """The session of the micro-batch at hand (the query's)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Where the driver's time went: ``read`` (the batch into the driver),
    ``transactions`` (the queues' database transactions, all in), ``evaluate`` (the part
    of them Spark SQL took, results back); and the steady state: ``steady_rows`` read by
    the micro-batches after the first (which also warms up Spark) and ``steady_seconds``
    from the second batch's start to the last one's end."""
    _second: float | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set to stop: no transaction begins (see the module's docstring)."""
    busy: threading.Lock = field(default_factory=threading.Lock)
    """Held while a micro-batch is processed, so that a stop can wait for it."""
    query: Any = None
    """The StreamingQuery, once started: stopped by its owner, it stops this run too."""

    def stopped(self) -> bool:
        """Whether the run is stopping: asked to, or Spark's query stopped under it."""
        if self.stopping.is_set():
            return True
        try:
            return self.query is not None and not self.query.isActive
        except Exception:  # py4j's: the JVM is gone, which stops the run too
            return True

    def spent(self, part: str, began: float) -> None:
        self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - began

    def batch(self, frame: Any, batch_id: int) -> None:
        with self.busy:
            if self.stopping.is_set():
                return  # left unprocessed: the next run's first batch reads it
            try:
                self._batch(frame, batch_id)
            except Exception as exc:
                if not isinstance(exc, _Stopped) and not (_spark_error(exc) and self.stopped()):
                    raise
                # Stopping: what the batch had not committed is read again, as above.

    def _batch(self, frame: Any, batch_id: int) -> None:
        # Read once, into the driver: the queues' transactions change what the source
        # would read again, and on SQLite a task reading the database inside one would
        # wait for it. The query's own session (a clone of ``spark``) evaluates.
        self.session = frame.sparkSession
        began = time.perf_counter()
        table = frame.toArrow()
        self.spent("read", began)
        if table.num_rows == 0:
            return
        steady = self.stats.batches > 0
        if steady and self._second is None:
            self._second = began
        now = float(pc.max(table["at"]).as_py())
        present = set(pc.unique(table["queue_id"]).to_pylist())
        for group in arrival_groups(self.compiled.plans):
            if self.stopping.is_set():
                break  # the parts left: as in batch()
            ids = [plan.queue_id for plan in group if plan.queue_id in present]
            if ids:
                rows = table.filter(pc.is_in(table["queue_id"], pa.array(ids, pa.int64())))
                queues = tuple(plan.name for plan in group)
                self._queue(rows.drop_columns(["at"]), queues, batch_id, now)
        self.stats.batches += 1
        if steady and self._second is not None:
            self.seconds["steady_rows"] = self.seconds.get("steady_rows", 0) + table.num_rows
            self.seconds["steady_seconds"] = time.perf_counter() - self._second

    def _queue(self, rows: pa.Table, queues: tuple[str, ...], batch_id: int, now: float) -> None:
        """The micro-batch's messages of one queue, or of an arrival group's queues
        (rules/arrival.py: processed in arrival order across them), in one transaction
        that records the part done."""
        backend = self.db.backend
        record = f"rules:{self.name}:{'+'.join(queues)}"
        done = backend.rules_read("rules_batch_of", {"name": record})
        if done and int(done[0][0]) >= batch_id:
            return  # a replayed batch: this part committed the first time
        ids = [int(i) for i in rows["id"].to_pylist()]
        while True:
            compiled = self.compiled
            group = tuple(p for p in compiled.plans if p.name in queues)
            if not group:
                return  # no longer processed by the rules
            evaluation = _Evaluations(self, compiled, group, rows, now)

            def mark(unit: RuleUnit) -> None:
                params = {"name": record, "batch": batch_id, "now": now}
                unit.statement_count("rules_batch_record", params)

            began = time.perf_counter()
            try:
                result = process_given(
                    self.db.context,
                    compiled.app,
                    group,
                    ids,
                    compiled.version,
                    compiled.queue_ids,
                    now=now,
                    evaluate=evaluation,
                    record=mark,
                    fast=compiled.fast,
                )
            except StalePlan:
                fresh = _compile(self.db)
                if _streamed(fresh) != _streamed(self.compiled):
                    raise ConfigurationError(
                        "the applied rules process other queues than when this Spark query "
                        "started: restart it (sluice run --engine spark) to stream them"
                    ) from None
                self.compiled = fresh
                continue
            self.spent("transactions", began)
            _fault_point(batch_id)
            self.stats.processed += result.processed
            self.stats.errors += result.errors
            self.stats.produced += sum(result.produced.values())
            self.stats.removed += result.removed
            return


class _Stopped(Exception):  # not an error: the run is stopping
    """Spark failed because the run is stopping: the transaction rolls back. Not a
    StorageError, which the runner takes for a message's fault (an error message)."""


def _spark_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("pyspark", "py4j"))


def _fault_point(batch_id: int) -> None:
    """For the crash tests: SLUICE_SPARK_FAULT=after_rules_queue kills the driver's whole
    process group (the JVM too, as kill -9 of a driver does) once the first queue of
    micro-batch 1 has committed, the rest of the batch not yet processed."""
    if os.environ.get("SLUICE_SPARK_FAULT") == "after_rules_queue" and batch_id == 1:
        os.killpg(os.getpgrp(), signal.SIGKILL)


class _Evaluations:
    """The runner's ``Evaluate`` on Spark for a queue or an arrival group of one
    micro-batch: each run's plan evaluated by its queue's ``_Evaluation``."""

    def __init__(
        self,
        engine: _Engine,
        compiled: _Compiled,
        group: tuple[QueuePlan, ...],
        rows: pa.Table,
        now: float,
    ) -> None:
        self.queues = {
            plan.name: _Evaluation(
                engine,
                compiled,
                plan.name,
                rows.filter(pc.equal(rows["queue_id"], plan.queue_id)).drop_columns(["queue_id"]),
                now,
            )
            for plan in group
        }

    def __call__(
        self, unit: RuleUnit, plan: QueuePlan, ids: list[int], omit: frozenset[int]
    ) -> list[Sequence[Any]]:
        return self.queues[plan.name](unit, plan, ids, omit)


class _Evaluation:
    """The runner's ``Evaluate`` on Spark for one queue of one micro-batch."""

    def __init__(
        self, engine: _Engine, compiled: _Compiled, queue: str, rows: pa.Table, now: float
    ) -> None:
        self.engine = engine
        self.spark = engine.session
        self.plan = plan = compiled.spark[queue]
        self.evaluations = compiled.evaluations
        self.queue = queue
        self.rows = rows
        self.now = now
        self.slices = SLICE_VIEW in compiled.evaluations[queue, frozenset()]
        # Snapshots of the queues the rules read, before the queue's transaction opens.
        for read_queue in sorted(plan.reads):
            queue_id = compiled.queue_ids.get(read_queue, 0)
            read = (
                self.spark.read.format("sluice_rules")
                .option("url", engine.url)
                .option("queue_id", str(queue_id))
                .load()
            )
            self.spark.createDataFrame(read.toArrow(), KEPT_SCHEMA).createOrReplaceTempView(
                queue_view(queue_id)
            )

    def __call__(
        self, unit: RuleUnit, plan: QueuePlan, ids: list[int], omit: frozenset[int]
    ) -> list[Sequence[Any]]:
        began = time.perf_counter()
        try:
            return self._evaluate(unit, plan, ids, self.evaluations[self.queue, omit])
        except StorageError:
            raise
        except Exception as exc:  # Spark's own: the runner finds the message at fault
            if _spark_error(exc):
                if self.engine.stopped():
                    raise _Stopped from exc  # its jobs were cancelled: no message's fault
                raise StorageError(f"Spark could not evaluate the rules: {exc}") from exc
            raise
        finally:
            self.engine.spent("evaluate", began)

    def _evaluate(
        self, unit: RuleUnit, plan: QueuePlan, ids: list[int], query: str
    ) -> list[Sequence[Any]]:
        spark = self.spark
        rows = self.rows
        if len(ids) != rows.num_rows:
            rows = rows.filter(pc.is_in(rows["id"], pa.array(ids, pa.int64())))
        spark.createDataFrame(rows, ROWS_SCHEMA).createOrReplaceTempView(BATCH_VIEW)
        if self.slices:
            self._slices(unit, plan, ids)
        result = spark.sql(query, args={**self.plan.params, "now": self.now}).toArrow()
        columns = [c.to_pylist() for c in result.columns]
        found = {int(r[0]): r for r in zip(*columns, strict=True)} if columns else {}
        return [found[ref] for ref in ids if ref in found]

    def _slices(self, unit: RuleUnit, plan: QueuePlan, ids: list[int]) -> None:
        """The view ``slice()`` reads: the members of the slices of ``ids``, as this
        transaction holds them (the waves before joined and reset theirs)."""
        rows: list[list[Any]] = []
        for join in plan.joins:  # the database's plan: its key SQL
            params = {**join.params, "ids": unit.ids(ids)}
            found = unit.template_rows(
                "rules_evaluate_lean", {"columns": f", {join.key_sql} AS k"}, params
            )
            keys = sorted({str(r[-1]) for r in found if r[-1] is not None})
            if not keys:
                continue
            members = unit.statement_rows(
                "rules_slice_rows", {"slicing": join.slicing, "keys": json.dumps(keys)}
            )
            rows.extend([r[0], r[1], r[2], r[3], *message_values(r[4:])] for r in members)
        columns: list[Sequence[Any]] = (
            list(zip(*rows, strict=True)) if rows else [[]] * len(SLICE_ARROW)
        )
        table = pa.table(
            [pa.array(list(c), f.type) for c, f in zip(columns, SLICE_ARROW, strict=True)],
            schema=SLICE_ARROW,
        )
        self.spark.createDataFrame(table, SLICE_SCHEMA).createOrReplaceTempView(SLICE_VIEW)


def run_rules(
    spark: Any,
    url: str,
    app: str | None = None,
    *,
    checkpoint: str,
    name: str = "rules",
    max_per_batch: int = 10_000,
    now: float | None = None,
    timings: dict[str, float] | None = None,
    stop: threading.Event | None = None,
) -> RunStats:
    """Run the rules application of ``url`` on Spark until nothing is due, as
    ``db.rules.run_until_idle()`` runs it locally, including what the rules produce on
    the way; then remove what retention lets go, and return what was done.

    ``app``: a definition to apply first (refused, with nothing applied, if it cannot
    run on Spark); None runs what is applied. ``checkpoint``: the query's checkpoint
    directory, kept with ``name`` (a restart from it goes on where the query stopped,
    exactly once). ``max_per_batch``: messages per queue and micro-batch. ``now``: a
    fixed time for every batch (tests on a manual clock); by default the database's.
    ``timings``: filled with the driver's seconds by part (see ``_Engine.seconds``).
    ``stop``: set (by a signal handler, say) to return early, as ``RulesRun.stop`` stops.
    """
    run = RulesRun(*_start(spark, url, app, checkpoint, name, max_per_batch, None, now))
    try:
        if stop is None:
            run.query.processAllAvailable()
        else:
            until_idle(run.query, stop)
    finally:
        run.stop()
    if timings is not None:
        timings.update(run.seconds)
    return run.stats


def start_rules(
    spark: Any,
    url: str,
    app: str | None = None,
    *,
    checkpoint: str,
    name: str = "rules",
    max_per_batch: int = 10_000,
    interval: float | None = None,
) -> RulesRun:
    """As ``run_rules``, but keep running, taking new messages as they come
    (``interval``: seconds between micro-batches; by default at once) until stopped:
    the RulesRun. Retention's removal runs in the engine's upkeep, as it does locally."""
    return RulesRun(*_start(spark, url, app, checkpoint, name, max_per_batch, interval, None))


class RulesRun:
    """A running rules application on Spark (``start_rules``): ``query``, Spark's
    StreamingQuery, and ``stop()``, which lets the transaction at hand finish first."""

    def __init__(self, query: Any, engine: _Engine) -> None:
        self.query = query
        self._engine = engine
        self._stopped = False

    @property
    def stats(self) -> RunStats:
        """What the run has done so far."""
        return self._engine.stats

    @property
    def seconds(self) -> Mapping[str, float]:
        """Where the driver's time went (see ``_Engine.seconds``)."""
        return self._engine.seconds

    def stop(self) -> RunStats:
        """Stop after the transaction at hand, then Spark's query; remove what retention
        lets go, as ``run_rules`` does at its end; return what the run did. What the
        micro-batch had not processed yet stays unprocessed for the next run (nothing is
        lost, nothing is processed twice). Safe to call again."""
        engine = self._engine
        if self._stopped:
            return engine.stats
        engine.stopping.set()
        with engine.busy:  # the micro-batch at hand is done; the next will do nothing
            pass
        try:
            self.query.stop()
        finally:
            self._stopped = True
            try:
                engine.stats.removed += engine.db.rules.remove()
            finally:
                engine.db.close()
        return engine.stats


def _start(  # noqa: PLR0917  (run_rules' and start_rules' arguments)
    spark: Any,
    url: str,
    app: str | None,
    checkpoint: str,
    name: str,
    max_per_batch: int,
    interval: float | None,
    now: float | None,
) -> tuple[Any, _Engine]:
    url = absolute_url(url)
    if "://" not in checkpoint:
        checkpoint = os.path.abspath(checkpoint)  # Spark resolves from where the JVM started
    db = sluice.connect(url)
    if now is not None:  # retention's removal reads the same time as the batches
        db.clock = ManualClock(now)
    try:
        if app is not None:
            db.rules.apply(app, check=check)
        compiled = _compile(db)
    except BaseException:
        db.close()
        raise
    spark.dataSource.register(RulesDataSource)
    register_functions(spark)
    engine = _Engine(spark, db, url, name, compiled)
    stream = (
        spark.readStream.format("sluice_rules")
        .option("url", url)
        .option("queues", json.dumps(_streamed(compiled)))
        .option("max_per_batch", str(max_per_batch))
    )
    if now is not None:
        stream = stream.option("now", repr(float(now)))
    writer = (
        stream.load()
        .writeStream.foreachBatch(engine.batch)
        .option("checkpointLocation", checkpoint)
        .queryName(f"sluice-rules-{name}")
    )
    if interval is not None:
        writer = writer.trigger(processingTime=f"{interval} seconds")
    engine.query = writer.start()
    return engine.query, engine


def _streamed(compiled: _Compiled) -> list[list[Any]]:
    """The queues the stream reads: every processed queue, [name, id, echo]."""
    return [[p.name, p.queue_id, p.echo] for p in compiled.plans]
