"""The rules engine at work: a batch of a queue's messages per database transaction.

For each batch the engine takes the queue's next due messages, joins them to their
slices, evaluates every rule against one snapshot (one SELECT for the batch, or one
per message where the rules read relations or reset slices), enqueues what the
chosen branches produce, resets slices and marks the batch processed: all in one
transaction, so a message is processed exactly once and a crash leaves no trace.
A failure while processing a message (a produced message its target refuses, a
NULL body, a missing queue, an expression the database cannot evaluate) rolls back
that message's actions alone and puts an error message in its error queue instead.
How a batch does it is batch.py; this module runs one in its transaction, again by
Python if the database refuses its SQL enqueue, and tells the waiting consumers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sluice.backends.base import Backend, RuleUnit
from sluice.engine.context import EngineContext
from sluice.engine.observe import Destination
from sluice.errors import StorageError
from sluice.rules.arrival import Group
from sluice.rules.batch import Batch
from sluice.rules.fast import ActionKey, FastInsert
from sluice.rules.model import Application
from sluice.rules.outcome import BatchResult, Evaluate, StalePlan
from sluice.rules.turns import Retake, Turns

__all__ = [
    "BatchResult",
    "Evaluate",
    "StalePlan",
    "process_batch",
    "process_given",
]


def process_batch(  # noqa: PLR0917  (what one batch needs)
    context: EngineContext,
    app: Application,
    group: Group,
    limit: int,
    version: int,
    fast: Mapping[str, Mapping[ActionKey, FastInsert]],
    queue_ids: Mapping[str, int],
    turns: Turns,
    *,
    traced: bool = False,
) -> BatchResult:
    """Process up to ``limit`` due messages of ``group``'s queues in one transaction: a
    queue taken alone, or an arrival group's queues in arrival order (rules/arrival.py).
    StalePlan if the applied version is not ``version`` any more. ``fast``: the SQL
    enqueues by queue; ``turns``: the group's, shared by the workers of this engine (see
    turns.py). ``traced``: what the batch makes inherits its triggers' trace context, and
    the batch is a ``process`` span (engine/observe.py); ``fast`` was built so too."""
    backend: Backend = context.backend
    durable = any(plan.definition.mode == "persistent" for plan in group)

    def attempt(fast: Mapping[str, Mapping[ActionKey, FastInsert]]) -> BatchResult:
        batches: list[Batch] = []

        def work(unit: RuleUnit) -> BatchResult:
            first = group[0]
            batch = Batch(context, app, first, unit, now=context.clock.now(), version=version,
                           fast=fast.get(first.name, {}), queue_ids=queue_ids,
                           turns=turns, traced=traced)  # fmt: skip
            batches.append(batch)
            return batch.run(limit) if len(group) == 1 else batch.run_group(group, fast, limit)

        rolled_back = True
        try:
            result = backend.rules_unit(work, durable=durable)
            rolled_back = False
            return result
        except Retake:
            rolled_back = False  # for an earlier batch's rollback: it voids nothing more
            raise
        finally:  # committed or rolled back: the next batch may write (see turns.py)
            for batch in batches:
                if batch.ticket is not None:
                    turns.done(batch.ticket, rolled_back=rolled_back)

    observer = context.observer
    if not traced or observer is None:
        return _with_fallback(context, group, fast, attempt)
    # One span for the batch, its triggers unknown until taken: each message it makes
    # carries its own trigger's creation context instead (docs/observability.md).
    where = (
        Destination(group[0].name)
        if len(group) == 1
        else Destination("+".join(p.name for p in group))
    )
    with observer.process(where, (), operation="rules") as span:
        result = _with_fallback(context, group, fast, attempt)
        span.count(result.processed)
    return result


def process_given(  # noqa: PLR0917  (what one batch needs)
    context: EngineContext,
    app: Application,
    group: Group,
    refs: list[int],
    version: int,
    queue_ids: Mapping[str, int],
    *,
    now: float,
    evaluate: Evaluate,
    record: Callable[[RuleUnit], None],
    fast: Mapping[str, Mapping[ActionKey, FastInsert]],
) -> BatchResult:
    """Process the messages ``refs`` of ``group``'s queues (one queue, or an arrival
    group's: rules/arrival.py) that are still due and unprocessed, in arrival order
    across them, as ``process_batch`` does, in one transaction with ``record(unit)`` (a
    Spark micro-batch's record: processed and recorded together, or neither). Evaluation
    by ``evaluate``, called with each run's plan; the decisions, writes, slices and error
    messages are the engine's own, so the outcome is the one ``process_batch`` gives for
    the same messages at ``now``. ``fast``: the SQL enqueues by queue (fast.build_fast),
    used as process_batch uses them: the messages a batch makes built by the database
    from their triggers, the branches chosen by the evaluated columns. StalePlan if the
    applied version is not ``version`` any more."""
    backend: Backend = context.backend
    durable = any(plan.definition.mode == "persistent" for plan in group)

    def attempt(fast: Mapping[str, Mapping[ActionKey, FastInsert]]) -> BatchResult:
        def work(unit: RuleUnit) -> BatchResult:
            first = group[0]
            batch = Batch(context, app, first, unit, now=now, version=version,
                           fast=fast.get(first.name, {}), queue_ids=queue_ids, turns=Turns(),
                           evaluate=evaluate)  # fmt: skip
            result = batch.run_given(group, fast, refs)
            record(unit)
            return result

        return backend.rules_unit(work, durable=durable)

    return _with_fallback(context, group, fast, attempt)


def _with_fallback(
    context: EngineContext,
    group: Group,
    fast: Mapping[str, Mapping[ActionKey, FastInsert]],
    attempt: Callable[[Mapping[str, Mapping[ActionKey, FastInsert]]], BatchResult],
) -> BatchResult:
    """``attempt(fast)``, then wake who waits for what it produced. A batch whose SQL
    enqueue the database refused failed as a whole (it has no savepoint): it is done
    again by Python, which finds the message at fault and makes its error message."""
    try:
        result = attempt(fast)
    except StorageError:
        if not any(fast.get(plan.name) for plan in group):
            raise
        result = attempt({})
    for queue, count in result.produced.items():
        context.wakeups.notify(queue, count)
    return result
