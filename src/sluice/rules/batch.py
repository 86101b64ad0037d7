"""One batch of the rules engine: a database transaction's worth of messages.

A batch takes its queue's next due messages (or an arrival group's, or a Spark
micro-batch's), joins them to their slices, has them evaluated (one SELECT for the
batch, in waves, or a message at a time, as the plan says), has the rules decide
(decide.py), writes what they made (by the SQL enqueue where it can: fast.py), resets
slices, makes the error messages of the messages that failed and marks the batch
processed, all in its unit; it writes in its turn (turns.py).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sluice.backends.base import Envelope, RuleUnit
from sluice.engine.content import QueueContent
from sluice.engine.context import EngineContext
from sluice.engine.enqueue import typed_envelope
from sluice.errors import QueueNotFound, SluiceError, StorageError
from sluice.expr.python_rules import json_number
from sluice.message import JSON, encode_json
from sluice.rules.arrival import Group
from sluice.rules.decide import Actions, Decider, Trigger, echo_time, read_trigger
from sluice.rules.failures import Failure, failure_of, rule_of
from sluice.rules.fast import (
    NOW_JSON,
    ActionKey,
    FastInsert,
    fast_choice,
    fast_shape,
    made_bodies,
)
from sluice.rules.model import Application, RuleDef
from sluice.rules.outcome import FIXED_COLUMNS, BatchResult, Evaluate, StalePlan
from sluice.rules.plan import SYSTEM_ERRORS, Join, QueuePlan, split_waves
from sluice.rules.turns import Retake, Turns

log = logging.getLogger("sluice.rules")

__all__ = ["Batch"]


class Batch:
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
        traced: bool = False,
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
        self.decider = Decider(app, now, self._typed, traced=traced)

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

    def run_given(
        self, group: Group, fast: Mapping[str, Mapping[ActionKey, FastInsert]], refs: list[int]
    ) -> BatchResult:
        """``run_group`` for the messages ``refs`` read elsewhere (a Spark micro-batch):
        those still due and unprocessed, in arrival order across the group's queues (a
        queue alone is a group of one); the plans' evaluation by ``self.evaluate``."""
        unit = self.unit
        self._exclude(group)
        params = {"ids": unit.ids(refs), "now": self.now,
                  "queues": unit.ids(sorted(p.queue_id for p in group))}  # fmt: skip
        return self._runs(group, fast, unit.statement_rows("rules_take_given", params))

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
        outcomes: dict[int, tuple[Sequence[Any] | None, Actions | Failure]] = {}
        for wave in split_waves(ids, self._keys(ids, keyed)):
            self._join(wave)
            decided: list[tuple[Sequence[Any] | None, Actions | Failure]]
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
        return {int(r[0]): tuple(r[FIXED_COLUMNS:]) for r in rows}

    def _alone(
        self, ref: int, act: Callable[[Sequence[Actions]], None]
    ) -> tuple[Sequence[Any] | None, Actions | Failure]:
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

    def _trigger_of(self, ref: int, row: Sequence[Any] | None) -> Trigger:
        """The message ``ref``, from its evaluated row or read alone if it has none."""
        return self._bare_trigger(ref) if row is None else self._trigger(row)

    def _write_in_order(
        self,
        ids: list[int],
        outcomes: Mapping[int, tuple[Sequence[Any] | None, Actions | Failure]],
    ) -> None:
        """The waves' enqueues and error messages, in the batch's order."""
        pending: list[tuple[Sequence[Any] | None, int, Actions]] = []
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

    def _flush(self, pending: Sequence[tuple[Sequence[Any] | None, int, Actions]]) -> None:
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
        """Which triggers each action's SQL enqueue takes, or None (see fast.fast_choice)."""
        shape = fast_shape(self.plan, self.fast, self.contents, self.context.content)
        return None if shape is None else fast_choice(shape, rows)

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
            "ids": unit.ids(ids), NOW_JSON: encode_json(json_number(self.now)),
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
    def _decide(self, row: Sequence[Any]) -> Actions | Failure:
        return self.decider.decide(self.plan, row)

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
    def _write(self, decided: Sequence[Actions]) -> None:
        self._reset(decided)
        self._enqueue([e for actions in decided for e in actions.envelopes])

    def _reset(self, decided: Sequence[Actions]) -> None:
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

    def _fail(self, trigger: Trigger, failure: Failure) -> None:
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
            when = echo_time(props, float(enqueued_at))
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

    def _origin(self, trigger: Trigger, rule: RuleDef | None) -> dict[str, Any]:
        return self.decider.origin(trigger, rule)

    # --- reading the trigger -----------------------------------------------------------
    def _trigger(self, row: Sequence[Any]) -> Trigger:
        return read_trigger(row, self.plan.name)

    def _bare_trigger(self, ref: int) -> Trigger:
        """The message alone, read without the rules' columns (which failed)."""
        params = {"ids": self.unit.ids([ref])}
        (row,) = self.unit.template_rows("rules_evaluate", {"columns": ""}, params)
        return self._trigger(row)
