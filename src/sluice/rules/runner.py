"""The rules engine at work: a batch of a queue's messages per database transaction.

For each batch the engine takes the queue's next due messages, joins them to their
slices, evaluates every rule against one snapshot (one SELECT for the batch, or one
per message where the rules read relations or reset slices), enqueues what the
chosen branches produce, resets slices and marks the batch processed: all in one
transaction, so a message is processed exactly once and a crash leaves no trace.
A failure while processing a message (a produced message its target refuses, a
NULL body, a missing queue, an expression the database cannot evaluate) rolls back
that message's actions alone and puts an error message in its error queue instead.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.backends.base import Backend, Envelope, RuleUnit
from sluice.backends.records import StoredProperty
from sluice.engine.content import QueueContent
from sluice.engine.context import EngineContext
from sluice.engine.enqueue import property_value, typed_envelope
from sluice.errors import MessageError, QueueNotFound, SluiceError, StorageError
from sluice.expr.python_rules import json_number
from sluice.expr.xml import parse_xml
from sluice.message import JSON, XML, decode_json, encode_json, is_json, is_xml
from sluice.rules.arrival import Group
from sluice.rules.failures import Failure, failure_of, rule_of
from sluice.rules.fast import ActionKey, FastInsert, made_bodies, usable
from sluice.rules.model import Application, RuleDef
from sluice.rules.plan import (
    SYSTEM_ERRORS,
    Join,
    PlannedEnqueue,
    PlannedReset,
    PlannedRule,
    QueuePlan,
)
from sluice.rules.turns import Retake, Turns

log = logging.getLogger("sluice.rules")

__all__ = [
    "BatchResult",
    "Evaluate",
    "StalePlan",
    "process_batch",
    "process_given",
    "process_group_given",
    "split_waves",
]

_FIXED_COLUMNS = 5
"""id, properties, content_type, body, body bytes: then the plan's columns."""


@dataclass(slots=True)
class BatchResult:
    processed: int = 0
    errors: int = 0
    produced: dict[str, int] = field(default_factory=dict)
    deferred: int = 0
    """Echo messages found not yet due: they wait until they are."""
    removed: int = 0
    """Processed messages removed as they were (their queue keeps none: see the plan)."""


Evaluate = Callable[[RuleUnit, QueuePlan, list[int], frozenset[int]], list[Sequence[Any]]]
"""The rules' columns of the messages ``ids`` of a plan's queue, evaluated elsewhere than
in the database (on Spark: sluice.spark.rules), in rules_evaluate's layout: id,
properties, content type, body text, body bytes, then the plan's columns. Called inside
the batch's unit, which it may read (a wave's slices as the waves before it left them).
The last argument: columns not needed, NULL in their places; if it is not empty, the
message's own parts may be NULL too (rules_evaluate_lean's layout, for the SQL enqueue)."""


class StalePlan(SluiceError):
    """Another version of the rules was applied: compile it, then process."""


@dataclass(frozen=True, slots=True)
class _Trigger:
    id: int
    queue: str
    properties: dict[str, Any]
    content_type: str
    body: Any
    """The body as a rule forwards it: JSON decoded, text and XML as str, else bytes."""


class _Batch:
    """One unit of work: what it has produced so far, and the numbers of its messages."""

    def __init__(
        self,
        context: EngineContext,
        app: Application,
        plan: QueuePlan,
        unit: RuleUnit,
        *,
        now: float,
        version: int,
        fast: Mapping[ActionKey, FastInsert],
        queue_ids: Mapping[str, int],
        turns: Turns,
        evaluate: Evaluate | None = None,
    ) -> None:
        self.evaluate = evaluate
        self._evaluated: dict[int, Sequence[Any]] = {}
        """Rows ``evaluate`` gave, by id (a batch falling back to Python reuses them)."""
        self.version = version
        self.turns = turns
        self.ticket: int | None = None
        """This batch's turn to write (see turns.py), once it has taken its messages."""
        self._waited = False
        self.fast = fast
        self.queue_ids = queue_ids
        self.context = context
        self.app = app
        self.plan = plan
        self.unit = unit
        self.now = now
        self.session, self.tx = context.next_transaction()
        self.num = 0
        self.result = BatchResult()
        self.contents: dict[str, QueueContent] = {}
        """The SQL enqueue's targets, as this batch found them."""

    # --- the unit ------------------------------------------------------------------
    def run(self, limit: int) -> BatchResult:
        plan, unit = self.plan, self.unit
        if self.fast and not plan.sequential and not plan.echo:
            return self._at_once(limit)
        for key in sorted(plan.locks):  # in one order everywhere: no deadlocks
            unit.exclusive(key)
        with self.turns.taking() as self.ticket:
            taken = unit.statement_rows(
                "rules_take", {"queue_id": plan.queue_id, "now": self.now, "limit": limit}
            )
        return self._taken(taken)

    def _taken(self, taken: Sequence[Sequence[Any]]) -> BatchResult:
        """Process what the take found (id, properties, enqueued_at, version rows)."""
        plan = self.plan
        ids = [int(r[0]) for r in taken]
        if not ids:
            return self.result
        # The applied version, read by the take in this transaction: never older rules.
        if int(taken[0][3] or 0) != self.version:
            raise StalePlan("the rules changed")
        if plan.echo:
            ids = self._echo_due(taken)
        elif not plan.sequential and self.fast and self.evaluate is not None:
            self._given_at_once(ids)
            self._processed(ids)
            return self.result
        elif not plan.sequential:
            self._messages(ids)
        elif plan.waves is not None:
            self._waves(ids, plan.waves)
        else:
            for ref in ids:
                self._messages([ref])
        if ids:
            self._done(ids)
        self._processed(ids)
        return self.result

    def run_group(
        self, group: Group, fast: Mapping[str, Mapping[ActionKey, FastInsert]], limit: int
    ) -> BatchResult:
        """A batch of an arrival group (rules/arrival.py): the next due messages of its
        queues in arrival order, each run of consecutive messages of one queue processed
        as a batch of that queue, after the runs before it. One engine at a time takes
        the group: what one run joins or resets, the next one's rules read."""
        unit = self.unit
        self._exclude(group)
        params = {"ids": unit.ids(sorted(p.queue_id for p in group)), "now": self.now,
                  "limit": limit}  # fmt: skip
        with self.turns.taking() as self.ticket:
            taken = unit.statement_rows("rules_take_group", params)
        return self._runs(group, fast, taken)

    def run_group_given(
        self, group: Group, fast: Mapping[str, Mapping[ActionKey, FastInsert]], refs: list[int]
    ) -> BatchResult:
        """``run_group`` for the messages ``refs`` read elsewhere (a Spark micro-batch):
        those still due and unprocessed, in arrival order across the group's queues."""
        unit = self.unit
        self._exclude(group)
        params = {"ids": unit.ids(refs), "now": self.now,
                  "queues": unit.ids(sorted(p.queue_id for p in group))}  # fmt: skip
        return self._runs(group, fast, unit.statement_rows("rules_take_group_given", params))

    def _exclude(self, group: Group) -> None:
        """One engine at a time takes the group: what one run joins or resets, the next
        one's rules read."""
        keys = {plan.queue_id for plan in group}.union(*(plan.locks for plan in group))
        for key in sorted(keys):  # in one order everywhere: no deadlocks
            self.unit.exclusive(key)

    def _runs(
        self,
        group: Group,
        fast: Mapping[str, Mapping[ActionKey, FastInsert]],
        taken: Sequence[Sequence[Any]],
    ) -> BatchResult:
        """Process ``taken`` (rules_take's rows with their queue's id last) run by run."""
        if taken and int(taken[0][3] or 0) != self.version:
            raise StalePlan("the rules changed")
        by_id = {plan.queue_id: plan for plan in group}
        for queue_id, run in itertools.groupby(taken, key=lambda row: int(row[4])):
            self.plan = by_id[queue_id]
            self.fast = fast.get(self.plan.name, {})
            self._run([row[:4] for row in run])
        return self.result

    def _run(self, taken: Sequence[Sequence[Any]]) -> None:
        """One run of an arrival group's batch: ``taken`` as rules_take gives them."""
        plan = self.plan
        if not self.fast or plan.sequential or self.evaluate is not None:
            self._taken(taken)
            return
        # As _at_once, for messages taken already: evaluated by one SELECT, written by the
        # SQL enqueue (process_group does the batch again by Python if that is refused).
        ids = [int(r[0]) for r in taken]
        self._join(ids)
        omit = made_bodies(plan, self.fast)
        params = {**plan.params, "now": self.now, "ids": self.unit.ids(ids)}
        columns = {"columns": plan.columns_sql(omit)}
        self._write_at_once(self.unit.template_rows("rules_evaluate_lean", columns, params), ids)
        self._processed(ids)

    def run_given(self, refs: list[int]) -> BatchResult:
        """As ``run``, for the messages ``refs`` read elsewhere (a Spark micro-batch): those
        still due and unprocessed, in delivery order; the plan's evaluation by
        ``self.evaluate``. One engine at a time per queue (and per slicing it reads)."""
        plan, unit = self.plan, self.unit
        for key in sorted(plan.locks | {plan.queue_id}):
            unit.exclusive(key)
        params = {"queue_id": plan.queue_id, "now": self.now, "ids": unit.ids(refs)}
        return self._taken(unit.statement_rows("rules_take_given", params))

    def _given_at_once(self, ids: list[int]) -> None:
        """``_at_once`` for messages evaluated elsewhere (``evaluate``), kept for the
        Python path if it is taken. Like ``_at_once`` with no savepoint: process_given
        does the batch again without SQL enqueues if the database refuses any of it."""
        self._join(ids)
        lean = made_bodies(self.plan, self.fast)
        assert self.evaluate is not None  # process_given's
        rows = self.evaluate(self.unit, self.plan, ids, lean)
        if not lean:  # full rows: the Python path, if taken, uses them as they are
            self._evaluated = {int(r[0]): r for r in rows}
        self._write_at_once(rows, ids)

    def _done(self, ids: list[int]) -> None:
        done = "rules_remove" if self.plan.removes else "rules_done"
        self.unit.statement_count(done, {"ids": self.unit.ids(ids), "now": self.now})

    def _at_once(self, limit: int) -> BatchResult:
        """A batch of a queue with SQL enqueues: taken and evaluated by one statement,
        written (and marked processed) by one more where nothing needs Python. No
        savepoint: if the database refuses any of it, process_batch does the batch again
        without SQL enqueues (the Python path then makes the error messages)."""
        plan, unit = self.plan, self.unit
        params = {**plan.params, "queue_id": plan.queue_id, "now": self.now, "limit": limit}
        # The bodies the SQL enqueue makes are built by its INSERT, not here as well.
        columns = {"columns": plan.columns_sql(made_bodies(plan, self.fast))}
        with self.turns.taking() as self.ticket:
            rows = unit.template_rows("rules_take_evaluate", columns, params)
        if not rows:
            return self.result
        if int(rows[0][-1] or 0) != self.version:
            raise StalePlan("the rules changed")
        ids = [int(r[0]) for r in rows]
        self._join(ids)
        self._write_at_once([r[:-1] for r in rows], ids)
        self._processed(ids)
        return self.result

    def _write_at_once(self, rows: Sequence[Sequence[Any]], ids: list[int]) -> None:
        """What the evaluated ``rows`` of ``ids`` (joined already) make, written by one SQL
        enqueue that also marks them processed, or by Python where one cannot."""
        chosen = self._fast_choice(rows)
        if chosen is None:
            self._messages(ids, joined=True)
            self._done(ids)
        elif not self._fast_write(chosen, ids):
            self._done(ids)  # no branch made anything

    def _processed(self, ids: list[int]) -> None:
        self.result.processed += len(ids)
        if self.plan.removes:
            self.result.removed += len(ids)

    def _join(self, ids: list[int]) -> None:
        """``ids`` join the slices of their queue's slicings."""
        unit = self.unit
        for join in self.plan.joins:
            params = {**join.params, "slicing": join.slicing, "ids": unit.ids(ids)}
            unit.template_rows("rules_join", {"value": join.key_sql}, params)

    def _messages(self, ids: list[int], *, joined: bool = False) -> None:
        """Join, evaluate, decide and write for ``ids``; per message if a part fails."""
        if not joined:
            self._join(ids)
        try:
            with self.unit.savepoint():
                rows = self._evaluate(ids)
                decided = [(row, self._decide(row)) for row in rows]
                self._write([d for _, d in decided if not isinstance(d, Failure)])
        except StorageError as exc:
            if len(ids) > 1:
                for ref in ids:  # find the one the database cannot process
                    self._messages_alone(ref)
                return
            self._fail(self._bare_trigger(ids[0]), Failure("evaluation", str(exc), None))
            return
        for row, outcome in decided:
            if isinstance(outcome, Failure):
                self._fail(self._trigger(row), outcome)

    # --- waves ------------------------------------------------------------------------
    def _waves(self, ids: list[int], keyed: Sequence[Join]) -> None:
        """Evaluate ``ids`` a wave at a time (see plan.py), then write what they made.

        A wave's joins, evaluation and resets see every wave before it; the enqueues wait
        for the end and go in the batch's order, as one message at a time would write them
        (nothing a wave reads is a queue the rules write into)."""
        outcomes: dict[int, tuple[Sequence[Any] | None, _Actions | Failure]] = {}
        for wave in split_waves(ids, self._keys(ids, keyed)):
            self._join(wave)
            decided: list[tuple[Sequence[Any] | None, _Actions | Failure]]
            try:
                with self.unit.savepoint():
                    decided = [(row, self._decide(row)) for row in self._evaluate(wave)]
                    self._reset([d for _, d in decided if not isinstance(d, Failure)])
            except StorageError as exc:
                if len(wave) == 1:
                    outcomes[wave[0]] = (None, Failure("evaluation", str(exc), None))
                    continue
                for ref in wave:  # one by one: which message can the database not take?
                    outcomes[ref] = self._alone(ref, self._reset)
                continue
            for row, outcome in decided:
                if row is not None:
                    outcomes[int(row[0])] = (row, outcome)
        self._write_in_order(ids, outcomes)

    def _keys(self, ids: list[int], keyed: Sequence[Join]) -> dict[int, tuple[Any, ...]]:
        """Each message's keys in the slicings that order the waves."""
        if not keyed:
            return {}
        columns = "".join(f", {j.key_sql} AS k{n}" for n, j in enumerate(keyed))
        params: dict[str, Any] = {"ids": self.unit.ids(ids)}
        for join in keyed:
            params.update(join.params)
        rows = self.unit.template_rows("rules_evaluate_lean", {"columns": columns}, params)
        return {int(r[0]): tuple(r[_FIXED_COLUMNS:]) for r in rows}

    def _alone(
        self, ref: int, act: Callable[[Sequence[_Actions]], None]
    ) -> tuple[Sequence[Any] | None, _Actions | Failure]:
        """One message of a part the database could not process whole: evaluated,
        decided and ``act``ed on alone; its row (None if it cannot be evaluated)."""
        try:
            with self.unit.savepoint():
                (row,) = self._evaluate([ref])
                outcome = self._decide(row)
                if not isinstance(outcome, Failure):
                    act([outcome])
        except StorageError as exc:
            return None, Failure("evaluation", str(exc), None)
        return row, outcome

    def _trigger_of(self, ref: int, row: Sequence[Any] | None) -> _Trigger:
        """The message ``ref``, from its evaluated row or read alone if it has none."""
        return self._bare_trigger(ref) if row is None else self._trigger(row)

    def _write_in_order(
        self,
        ids: list[int],
        outcomes: Mapping[int, tuple[Sequence[Any] | None, _Actions | Failure]],
    ) -> None:
        """The waves' enqueues and error messages, in the batch's order."""
        pending: list[tuple[Sequence[Any] | None, int, _Actions]] = []
        for ref in ids:
            row, outcome = outcomes[ref]
            if isinstance(outcome, Failure):
                self._flush(pending)
                pending = []
                trigger = self._trigger_of(ref, row)
                self._fail(trigger, outcome)
            else:
                pending.append((row, ref, outcome))
        self._flush(pending)

    def _flush(self, pending: Sequence[tuple[Sequence[Any] | None, int, _Actions]]) -> None:
        """Enqueue what ``pending`` made; a message the database refuses gets its error."""
        if not pending:
            return
        try:
            envelopes = [e for _, _, actions in pending for e in actions.envelopes]
            # Numbered again in the batch's order: the database orders a commit's messages
            # by number, and the waves numbered them in the order they were decided.
            first, self.num = self.num + 1, self.num + len(envelopes)
            with self.unit.savepoint():
                self._enqueue([e._replace(num=first + n) for n, e in enumerate(envelopes)])
            return
        except (SluiceError, StorageError) as exc:
            if len(pending) > 1:
                for one in pending:  # find the one the database refuses
                    self._flush([one])
                return
            row, ref, _ = pending[0]
            # Its resets stay done: they ran with its wave, before the refusal.
            kind = "queue" if isinstance(exc, QueueNotFound) else "message"
            self._fail(self._trigger_of(ref, row), Failure(kind, str(exc), None))

    def _fast_choice(self, rows: Sequence[Sequence[Any]]) -> dict[ActionKey, list[int]] | None:
        """Which triggers each action's SQL enqueue takes, or None if any message needs
        the Python path (an action without one, or a check that fails: it makes the
        error message)."""
        shape = self._fast_shape()
        if shape is None:
            return None
        chosen: dict[ActionKey, list[int]] = {}
        for row in rows:
            values = row[_FIXED_COLUMNS:]
            ref = row[0]
            for key_column, branches in shape:
                if key_column is not None and values[key_column] is None:
                    continue
                for condition, actions in branches:
                    if condition is not None and not values[condition]:
                        continue
                    if actions is None:
                        return None
                    for key, check in actions:
                        if check is not None and not check.passes(values):
                            return None
                        chosen.setdefault(key, []).append(ref)
                    break
        return chosen

    def _fast_shape(self) -> list[tuple[int | None, list[tuple[int | None, Any]]]] | None:
        """The plan's rules as the fast path walks them: per rule its key column and per
        branch its condition and its actions with their checks (None: a branch that needs
        the Python path); None if a target does not take plain messages now."""
        contents = self.contents
        for fast in self.fast.values():
            if fast.queue not in contents:
                content = self.context.content(fast.queue)
                if not usable(fast, content):
                    return None
                contents[fast.queue] = content
        shape = []
        for r, planned in enumerate(self.plan.rules):
            branches: list[tuple[int | None, Any]] = []
            for b, branch in enumerate(planned.branches):
                actions: list[tuple[ActionKey, _Check | None]] | None = []
                for a, action in enumerate(branch.actions):
                    planned_fast = self.fast.get((r, b, a))
                    if (
                        planned_fast is None
                        or not isinstance(action, PlannedEnqueue)
                        or actions is None
                    ):
                        actions = None
                        continue
                    check = _Check.of(action, contents[planned_fast.queue], planned_fast)
                    trivial = not (check.declared or check.computed)
                    actions.append(((r, b, a), None if trivial else check))
                branches.append((branch.condition, actions))
            shape.append((planned.key, branches))
        return shape

    def _fast_write(self, chosen: Mapping[ActionKey, list[int]], ids: list[int]) -> bool:
        """Every message of the batch in one INSERT, each action a part of it, which also
        marks the batch (``ids``) processed; False if there was nothing to insert."""
        unit = self.unit
        made = sorted(
            ((self.fast[k], refs) for k, refs in chosen.items()), key=lambda m: m[0].number
        )
        if not made:
            return False
        params: dict[str, Any] = {
            **self.plan.params, "now": self.now, "session": self.session, "tx": self.tx,
            "ids": unit.ids(ids),
        }  # fmt: skip
        queues: dict[str, int] = {}
        produced = self.result.produced
        picks = dict.fromkeys(ids, 0)  # per trigger its actions, bit k for action k
        for fast, refs in made:
            bit = 1 << fast.number
            for ref in refs:
                picks[ref] |= bit
            queues[fast.queue] = queue_id = self.queue_ids[fast.queue]
            params.update(fast.params)
            params[fast.ids] = unit.ids(refs)
            params[fast.queue_id] = queue_id
            params[fast.max_size] = self.contents[fast.queue].spec.max_size
            produced[fast.queue] = produced.get(fast.queue, 0) + len(refs)
        # As signed 64-bit integers (action 63 is the sign bit).
        params["picks"] = unit.ids([p - (1 << 64) if p >> 63 else p for p in picks.values()])
        holes = {
            "parts": ", ".join(fast.part for fast, _ in made),
            "rows": " UNION ALL ".join(fast.rows for fast, _ in made),
        }
        self._my_turn()
        done = "rules_remove" if self.plan.removes else "rules_done"
        count = unit.insert_selected(queues, holes, params, done=done)
        expected = sum(len(refs) for _, refs in made)
        if count != expected:  # every trigger was taken in this transaction: never
            raise StorageError(f"the SQL enqueue made {count} messages of {expected}")
        return True

    def _messages_alone(self, ref: int) -> None:
        # The joins ran already for the whole batch; evaluation is per message now.
        row, outcome = self._alone(ref, self._write)
        if isinstance(outcome, Failure):
            self._fail(self._trigger_of(ref, row), outcome)

    def _evaluate(self, ids: list[int]) -> list[Sequence[Any]]:
        """The rules' columns for ``ids``, after the messages' own parts."""
        plan = self.plan
        if self.evaluate is not None and not plan.echo:
            known = self._evaluated
            if known and all(ref in known for ref in ids):  # evaluated once already
                return [known[ref] for ref in ids]
            return self.evaluate(self.unit, plan, ids, frozenset())
        params = {**plan.params, "now": self.now, "ids": self.unit.ids(ids)}
        return list(
            self.unit.template_rows("rules_evaluate", {"columns": plan.columns_sql()}, params)
        )

    # --- deciding --------------------------------------------------------------------
    def _decide(self, row: Sequence[Any]) -> _Actions | Failure:
        """What the rules do for one message: its resets and envelopes, or its failure."""
        trigger = self._trigger(row)
        actions = _Actions()
        for planned in self.plan.rules:
            try:
                self._rule(planned, row, trigger, actions)
            except StorageError:
                raise  # the database's: the part is done again a message at a time
            except Exception as exc:  # any other, sluice's or not: this message's error
                return failure_of(exc, planned.rule)
        return actions

    def _rule(
        self, planned: PlannedRule, row: Sequence[Any], trigger: _Trigger, actions: _Actions
    ) -> None:
        values = row[_FIXED_COLUMNS:]
        if planned.key is not None and values[planned.key] is None:
            return  # the message is in no slice of this rule's slicing
        for branch in planned.branches:
            if branch.condition is not None and not values[branch.condition]:
                continue
            for action in branch.actions:
                if isinstance(action, PlannedReset):
                    key = values[action.key]
                    if key is not None:
                        actions.resets.append((action.slicing, str(key)))
                else:
                    actions.envelopes.append(self._envelope(planned.rule, action, values, trigger))
            return

    def _envelope(
        self, rule: RuleDef, action: PlannedEnqueue, values: Sequence[Any], trigger: _Trigger
    ) -> Envelope:
        body, content_type = self._body(rule, action, values, trigger)
        target = self.app.queues.get(action.queue)
        properties: dict[str, Any] = {}
        for name, prop in self.app.properties.items():
            if prop.inherited and action.queue in prop.values and name in trigger.properties:
                properties[name] = trigger.properties[name]
        for name, column in action.properties:
            value = values[column]
            if value is None:
                properties.pop(name, None)
            else:
                properties[name] = _json_value(value, self.app, name)
        properties |= self._origin(trigger, rule)
        available = self.now
        if target is not None and target.kind == "echo":
            available = _echo_time(properties, self.now)
        return self._typed(action.queue, body, content_type, properties, available)

    def _body(
        self, rule: RuleDef, action: PlannedEnqueue, values: Sequence[Any], trigger: _Trigger
    ) -> tuple[Any, str | None]:
        if action.kind == "same":
            return trigger.body, trigger.content_type
        assert action.body is not None
        value = values[action.body]
        if action.kind == "scalar" and value is not None:
            (value,) = json.loads(value) if isinstance(value, str) else value
            if value is not None:
                return value, JSON
        if value is None:
            raise Failure(
                "body",
                f"line {action.line}: the body of the message for {action.queue!r} is NULL",
                rule,
            )
        return _shaped(action.kind, value)

    def _typed(
        self,
        queue: str,
        body: Any,
        content_type: str | None,
        properties: dict[str, Any],
        available: float,
    ) -> Envelope:
        content = self.context.content(queue)  # QueueNotFound: a Failure of kind "queue"
        self.num += 1
        # A queue with declared properties stores them with the computed ones
        # (typed_envelope); any other keeps these as they are, as an enqueue does.
        given = encode_json(properties) if properties and not content.stored else None
        base = Envelope(queue, 0, 0, "", content_type or "", given, None, None,
                        self.now, available, None, None, None, None, None)  # fmt: skip
        return typed_envelope(
            self.context.types, content, base, num=self.num, body=body, priority=None,
            properties=properties,
        )  # fmt: skip

    # --- writing ---------------------------------------------------------------------
    def _write(self, decided: Sequence[_Actions]) -> None:
        self._reset(decided)
        self._enqueue([e for actions in decided for e in actions.envelopes])

    def _reset(self, decided: Sequence[_Actions]) -> None:
        """Empty the slices ``decided`` reset: one statement for all of them."""
        pairs = sorted({pair for actions in decided for pair in actions.resets})
        if pairs:
            self.unit.statement_count("rules_reset", {"pairs": json.dumps(pairs)})

    def _my_turn(self) -> None:
        """Before the batch's first write: the batches taken before it have written."""
        if not self._waited and self.ticket is not None:
            self.turns.wait(self.ticket)
            self._waited = True

    def _put(self, envelopes: Sequence[Envelope]) -> None:
        """Every enqueue of the batch, in its turn."""
        self._my_turn()
        self.unit.enqueue(self.session, self.tx, envelopes)

    def _enqueue(self, envelopes: Sequence[Envelope]) -> None:
        self._put(envelopes)
        for e in envelopes:
            self.result.produced[e.queue] = self.result.produced.get(e.queue, 0) + 1

    def _fail(self, trigger: _Trigger, failure: Failure) -> None:
        """Send the error message for ``trigger``; the trigger counts as processed."""
        rule = failure.rule = rule_of(failure, [p.rule for p in self.plan.rules])
        document = {
            "error": failure.kind,
            "rule": None if rule is None else rule.name,
            "message": str(failure),
            "at": self.now,
            "trigger": {
                "id": self._message_id(trigger.id),
                "seq": trigger.id,
                "queue": trigger.queue,
                "content_type": trigger.content_type,
                "body": trigger.body if not isinstance(trigger.body, bytes) else None,
            },
        }
        properties = self._origin(trigger, rule)
        chosen = [
            rule.error_queue if rule is not None else None,
            self.plan.definition.error_queue,
            self.app.error_queue,
            SYSTEM_ERRORS,
        ]
        for queue in [q for q in chosen if q is not None]:
            try:
                with self.unit.savepoint():
                    envelope = self._typed(queue, document, JSON, properties, self.now)
                    self._put([envelope])
            except Retake:
                raise
            except Exception as exc:  # refused there (a type, a missing queue): the next takes it
                log.warning("rules: error queue %r refused an error message: %s", queue, exc)
                continue
            self.result.produced[queue] = self.result.produced.get(queue, 0) + 1
            self.result.errors += 1
            log.warning("rules: message %s of %r failed, error message in %r: %s", trigger.id,
                        trigger.queue, queue, failure, exc_info=failure.__cause__)  # fmt: skip
            return
        raise StorageError(f"no error queue took the error of message {trigger.id}: {failure}")

    def _message_id(self, ref: int) -> str:
        """The message ``ref`` as its readers know it (Message.id): its row number is the
        error message's ``seq`` (the ``trigger_id`` of what its rules made)."""
        ((session, tx, num),) = self.unit.statement_rows("rules_message_id", {"id": ref})
        return f"{session}/{tx}/{num}"

    # --- echo ------------------------------------------------------------------------
    def _echo_due(self, taken: Sequence[Sequence[Any]]) -> list[int]:
        """Echo messages: those due go to their target now; the others wait till then."""
        due = []
        for ref, properties, enqueued_at, _ in taken:
            props = json.loads(properties) if properties else {}
            when = _echo_time(props, float(enqueued_at))
            if when > self.now:
                self.unit.statement_count("rules_defer", {"id": ref, "due": when})
                self.result.deferred += 1
            else:
                due.append(int(ref))
        for row in self._evaluate(due) if due else []:  # the due ones' bodies, at once
            trigger = self._trigger(row)
            target = trigger.properties.get("echo_target")
            properties = {
                k: v for k, v in trigger.properties.items()
                if k not in ("echo_target", "echo_after", "echo_at")
            }  # fmt: skip
            properties |= self._origin(trigger, None)
            try:
                if not isinstance(target, str):
                    raise Failure(
                        "echo", f"echo message {trigger.id} has no text echo_target", None
                    )
                with self.unit.savepoint():
                    envelope = self._typed(
                        target, trigger.body, trigger.content_type, properties, self.now
                    )
                    self._put([envelope])
                self.result.produced[target] = self.result.produced.get(target, 0) + 1
            except Retake:
                raise
            except Exception as exc:  # sluice's or not: the echo message's error
                self._fail(trigger, failure_of(exc, None, kind="echo"))
        return due

    def _origin(self, trigger: _Trigger, rule: RuleDef | None) -> dict[str, Any]:
        """The system properties of a message made while processing ``trigger``."""
        origin: dict[str, Any] = {
            "created_at": self.now,
            "trigger_id": trigger.id,
            "trigger_queue": trigger.queue,
        }
        if rule is not None:
            origin["rule"] = rule.name
        return origin

    # --- reading the trigger -----------------------------------------------------------
    def _trigger(self, row: Sequence[Any]) -> _Trigger:
        ref, properties, content_type, text, data = row[:_FIXED_COLUMNS]
        content_type = content_type or JSON
        raw: Any = data if data is not None else text
        if isinstance(raw, memoryview):
            raw = bytes(raw)
        if is_json(content_type):
            body = decode_json(raw)
        elif isinstance(raw, bytes) and (is_xml(content_type) or content_type.startswith("text/")):
            body = raw.decode("utf-8")
        else:
            body = raw
        props = json.loads(properties) if properties else {}
        return _Trigger(int(ref), self.plan.name, props, content_type, body)

    def _bare_trigger(self, ref: int) -> _Trigger:
        """The message alone, read without the rules' columns (which failed)."""
        params = {"ids": self.unit.ids([ref])}
        (row,) = self.unit.template_rows("rules_evaluate", {"columns": ""}, params)
        return self._trigger(row)


@dataclass(slots=True)
class _Actions:
    resets: list[tuple[str, str]] = field(default_factory=list)
    envelopes: list[Envelope] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Check:
    """What must hold of an action's evaluated values for its SQL enqueue to be sure to
    be accepted by its target (else the Python path makes the message or the error). A
    NULL or too large body the SQL leaves out itself (see rules_made)."""

    declared: tuple[tuple[int, StoredProperty, str], ...]
    """(column, the target's property a WITH sets, the target's name)."""
    computed: tuple[int, ...] = ()
    """Columns that hold where computed properties read off the trigger have their types."""

    @classmethod
    def of(cls, action: PlannedEnqueue, content: QueueContent, fast: FastInsert) -> _Check:
        by_name = {p.name: p for p, _ in content.stored}
        queue = content.spec.name
        declared = tuple(
            (column, by_name[name], queue) for name, column in action.properties if name in by_name
        )
        return cls(declared, fast.checks)

    def passes(self, values: Sequence[Any]) -> bool:
        for column, prop, queue in self.declared:
            value = values[column]
            if value is not None:
                if prop.type == "boolean" and isinstance(value, int):
                    value = bool(value)  # SQLite's booleans, made JSON ones by the SQL
                try:
                    property_value(prop, value, queue)
                except MessageError:
                    return False
        # Else the Python path makes the message, or its error message.
        return all(values[column] for column in self.computed)


def split_waves(ids: Sequence[int], keys: Mapping[int, tuple[Any, ...]]) -> list[list[int]]:
    """``ids`` in waves: each message one wave after the last earlier one it shares a
    key with (None shares nothing), so a wave holds at most one message per slice."""
    waves: list[list[int]] = []
    last: dict[tuple[int, Any], int] = {}
    for ref in ids:
        found = [(n, k) for n, k in enumerate(keys.get(ref, ())) if k is not None]
        wave = max((last[f] + 1 for f in found if f in last), default=0)
        for f in found:
            last[f] = wave
        if wave == len(waves):
            waves.append([])
        waves[wave].append(ref)
    return waves


def _shaped(kind: str, value: Any) -> tuple[Any, str | None]:
    """A body column's value as a body and its content type, by how it was built."""
    if kind == "json":
        return (json.loads(value) if isinstance(value, str) else value), JSON
    if kind == "xml":
        return _canonical_xml(value), XML
    if kind == "text" or not isinstance(value, bool | int | float):
        return str(value), None
    return json_number(value), JSON  # 7, not 7.0: as every engine writes a number in JSON


def _json_value(value: Any, app: Application, name: str) -> Any:
    """A WITH value as the properties JSON holds it (booleans from SQLite's 0 and 1;
    numbers as every engine writes them: 8.0 is 8)."""
    prop = app.properties.get(name)
    if prop is not None and prop.type == "boolean" and isinstance(value, int):
        return bool(value)
    return json_number(value)


def _echo_time(properties: Mapping[str, Any], since: float) -> float:
    """When an echo message is due: ``echo_at``, else ``echo_after`` seconds after ``since``."""
    at = properties.get("echo_at")
    if isinstance(at, int | float) and not isinstance(at, bool):
        return float(at)
    after = properties.get("echo_after")
    if isinstance(after, int | float) and not isinstance(after, bool):
        return since + float(after)
    return since


def _canonical_xml(text: Any) -> str:
    """XML text in one form (C14N) whichever database built it."""
    from lxml import etree  # noqa: PLC0415  (lxml is optional: only XML bodies need it)

    root = parse_xml(text if isinstance(text, str | bytes) else str(text))
    canonical: bytes = etree.tostring(root, method="c14n")
    return canonical.decode("utf-8")


def process_batch(  # noqa: PLR0917  (what one batch needs)
    context: EngineContext,
    app: Application,
    group: Group,
    limit: int,
    version: int,
    fast: Mapping[str, Mapping[ActionKey, FastInsert]],
    queue_ids: Mapping[str, int],
    turns: Turns,
) -> BatchResult:
    """Process up to ``limit`` due messages of ``group``'s queues in one transaction: a
    queue taken alone, or an arrival group's queues in arrival order (rules/arrival.py).
    StalePlan if the applied version is not ``version`` any more. ``fast``: the SQL
    enqueues by queue; ``turns``: the group's, shared by the workers of this engine (see
    turns.py)."""
    backend: Backend = context.backend
    durable = any(plan.definition.mode == "persistent" for plan in group)

    def attempt(fast: Mapping[str, Mapping[ActionKey, FastInsert]]) -> BatchResult:
        batches: list[_Batch] = []

        def work(unit: RuleUnit) -> BatchResult:
            first = group[0]
            batch = _Batch(context, app, first, unit, now=context.clock.now(), version=version,
                           fast=fast.get(first.name, {}), queue_ids=queue_ids,
                           turns=turns)  # fmt: skip
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

    try:
        result = attempt(fast)
    except StorageError:
        if not any(fast.get(plan.name) for plan in group):
            raise
        # The SQL enqueue's batch failed as a whole (it has no savepoint): again by Python,
        # which finds the message at fault and makes its error message.
        result = attempt({})
    for queue, count in result.produced.items():
        context.wakeups.notify(queue, count)
    return result


def process_given(  # noqa: PLR0917  (what one batch needs)
    context: EngineContext,
    app: Application,
    plan: QueuePlan,
    refs: list[int],
    version: int,
    queue_ids: Mapping[str, int],
    *,
    now: float,
    evaluate: Evaluate,
    record: Callable[[RuleUnit], None],
    fast: Mapping[ActionKey, FastInsert] | None = None,
) -> BatchResult:
    """Process the messages ``refs`` of ``plan``'s queue that are still due and
    unprocessed, as ``process_batch`` does, in one transaction with ``record(unit)`` (a
    Spark micro-batch's record: processed and recorded together, or neither). Evaluation
    by ``evaluate``; the decisions, writes, slices and error messages are the engine's
    own, so the outcome is the one ``process_batch`` gives for the same messages at
    ``now``. ``fast``: the plan's SQL enqueues (fast.build_fast), used as process_batch
    uses them: the messages a batch makes built by the database from their triggers, the
    branches chosen by the evaluated columns. StalePlan if the applied version is not
    ``version`` any more."""
    return _given(context, app, (plan,), refs, version, queue_ids, now=now,
                  evaluate=evaluate, record=record, fast={plan.name: fast or {}})  # fmt: skip


def process_group_given(  # noqa: PLR0917  (what one batch needs)
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
    """``process_given`` for an arrival group (rules/arrival.py): ``refs`` of its queues,
    processed in arrival order across them, as ``process_batch`` processes the group;
    ``evaluate`` is called with each run's plan; ``fast``: the SQL enqueues by queue."""
    return _given(context, app, group, refs, version, queue_ids, now=now,
                  evaluate=evaluate, record=record, fast=fast)  # fmt: skip


def _given(  # noqa: PLR0917  (what one batch needs)
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
    backend: Backend = context.backend
    durable = any(plan.definition.mode == "persistent" for plan in group)

    def attempt(fast: Mapping[str, Mapping[ActionKey, FastInsert]]) -> BatchResult:
        def work(unit: RuleUnit) -> BatchResult:
            first = group[0]
            batch = _Batch(context, app, first, unit, now=now, version=version,
                           fast=fast.get(first.name, {}), queue_ids=queue_ids, turns=Turns(),
                           evaluate=evaluate)  # fmt: skip
            if len(group) == 1:
                result = batch.run_given(refs)
            else:
                result = batch.run_group_given(group, fast, refs)
            record(unit)
            return result

        return backend.rules_unit(work, durable=durable)

    try:
        result = attempt(fast)
    except StorageError:
        if not any(fast.get(plan.name) for plan in group):
            raise
        result = attempt({})  # the SQL enqueue refused the batch: by Python, as process_batch
    for queue, count in result.produced.items():
        context.wakeups.notify(queue, count)
    return result
