"""Enqueues built by SQL: the messages a batch's rules produce, made by the database.

Where a queue's rules read no relation and reset no slice (a batch is evaluated at
once), and a rule's target takes plain messages (no types, priority functions,
slotted properties, isolation or computed integers), every message a batch's actions
produce is made by one ``INSERT ... SELECT`` over their triggering messages (each
action a part of it): body, properties (inherited, WITH, system) and the target's
computed properties are SQL (each read off the trigger's body), and Python only decides
which triggers chose which branch and checks the types of WITH and computed properties;
the INSERT leaves out a NULL or too large body. Anything else, or any check that fails,
takes the Python path, which makes the error messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sluice.backends.base import Backend
from sluice.backends.records import StoredProperty
from sluice.engine.content import QueueContent
from sluice.engine.enqueue import property_value
from sluice.engine.observe import TRACE_PROPERTIES
from sluice.errors import MessageError
from sluice.expr import Node, parse
from sluice.expr.coercion import as_type
from sluice.expr.nodes import IsNull, JsonObject, Logic, Path
from sluice.rules.model import PROPERTY_TYPES, Application
from sluice.rules.outcome import FIXED_COLUMNS
from sluice.rules.plan import PlannedEnqueue, QueuePlan

__all__ = [
    "NOW_JSON",
    "ActionKey",
    "Check",
    "FastInsert",
    "Shape",
    "build_fast",
    "fast_choice",
    "fast_shape",
    "made_bodies",
    "usable",
]

ActionKey = tuple[int, int, int]
"""(rule, branch, action) in a queue's plan."""

NOW_JSON = "now_json"
"""The parameter of the SQL enqueue that holds the batch's time as JSON text."""

_MAX_ACTIONS = 64
"""p_num is trigger id * 64 + the action's number."""


@dataclass(frozen=True, slots=True)
class FastInsert:
    """One action's part of rules_insert: its derived table of new messages and its rows."""

    queue: str
    number: int
    part: str
    rows: str
    params: Mapping[str, Any]
    stored: tuple[StoredProperty, ...]
    """The target's stored properties this was built for: if they change, it is not used."""
    ids: str
    """The parameter of the triggers whose messages this action makes."""
    queue_id: str
    """The parameter of the target's id."""
    max_size: str
    """The parameter of the target's largest body (bytes): a larger one is left out."""
    checks: tuple[int, ...] = ()
    """The plan's columns that must hold for the messages this action makes to be taken:
    their computed properties read off the trigger have their types."""
    check_nodes: tuple[Node, ...] = ()
    """The expressions of ``checks``, over the trigger: another engine that evaluates the
    plan (Spark's) computes them too."""


def made_bodies(plan: QueuePlan, fast: Mapping[ActionKey, FastInsert]) -> frozenset[int]:
    """The plan's columns of the bodies ``fast``'s INSERT builds itself: an evaluation for
    the SQL enqueue leaves them out (the Python path, if taken, evaluates them)."""
    return frozenset(
        body
        for r, b, a in fast
        if isinstance(action := plan.rules[r].branches[b].actions[a], PlannedEnqueue)
        and (body := action.body) is not None
    )


def build_fast(
    app: Application, backend: Backend, plan: QueuePlan, *, traced: bool = False
) -> dict[ActionKey, FastInsert]:
    """The SQL enqueue of every action of ``plan`` that can have one. ``traced``: each
    made message inherits its trigger's trace context (engine/observe.py), as the Python
    path's do (decide.Decider)."""
    if plan.sequential:
        return {}
    found: dict[ActionKey, FastInsert] = {}
    number = 0
    for r, planned in enumerate(plan.rules):
        for b, branch in enumerate(planned.branches):
            for a, action in enumerate(branch.actions):
                number += 1
                if isinstance(action, PlannedEnqueue) and number < _MAX_ACTIONS:
                    fast = _insert(app, backend, plan, planned.rule.name, action, number, traced)
                    if fast is not None:
                        found[(r, b, a)] = fast
    return found


def _insert(  # noqa: PLR0917  (one action's part of its queue's plan)
    app: Application,
    backend: Backend,
    plan: QueuePlan,
    rule: str,
    action: PlannedEnqueue,
    number: int,
    traced: bool,
) -> FastInsert | None:
    target = app.queues.get(action.queue)
    if target is None or target.kind == "echo":
        return None
    body_sql = "" if action.body is None else plan.columns[action.body]
    body = backend.rules_body(action.kind, body_sql)
    stored = tuple(backend.stored_properties(action.queue))
    if body is None or any(p.expression is not None and p.type == "integer" for p in stored):
        return None
    compiler = backend.rules_compiler(None, prefix=f"f{number}_")
    # The batch's time as JSON text the batch binds (NOW_JSON: the number as every engine
    # writes it, 8.0 as 8), so no row formats it again.
    now = backend.rules_json_text(compiler.placeholder(NOW_JSON))
    pairs: dict[str, tuple[str, str]] = {}
    if traced:  # NULL where the trigger has none: left out, as inherited values are
        for name in TRACE_PROPERTIES:
            pairs[name] = (backend.rules_inherited(name), "json")
    for name, prop in app.properties.items():
        if prop.inherited and action.queue in prop.values:
            pairs[name] = (backend.rules_inherited(name), "json")
    for name, column in action.properties:
        declared = app.properties.get(name)
        kind = PROPERTY_TYPES[declared.type] if declared is not None else "text"
        pairs[name] = (plan.columns[column], kind)
    nullable = bool(pairs)  # inherited and WITH values may be NULL: left out
    pairs["rule"] = (f"CAST({compiler.bind(rule)} AS TEXT)", "text")
    pairs["created_at"] = (now, "json")
    pairs["trigger_id"] = ("m.id", "integer")  # a row id: written as it is
    pairs["trigger_queue"] = (f"CAST({compiler.bind(plan.name)} AS TEXT)", "text")
    # The target's computed properties, each read off the trigger's body (the Python path
    # computes the others, and refuses a value of another type: see checks).
    checks = []
    check_nodes: list[Node] = []
    for p in stored:
        if p.expression is None or p.name in pairs:
            continue  # a property the message sets keeps its value, as at any enqueue
        read = _off_the_trigger(p.expression, action)
        if read is None:
            return None
        if read[0] is not None:
            nullable = True  # a JSON null, or none there: left out
            want = PROPERTY_TYPES[p.type]
            typed = as_type(read[0], want, p.expression)
            pairs[p.name] = (compiler.compile(typed), "boolean" if want == "boolean" else "value")
            # An enqueue refuses a value of another type: true where it has the type or is
            # none (a JSON null goes by Python, which leaves it out).
            fits = Logic("or", (IsNull(typed, negated=True), IsNull(read[0], negated=False)))
            plan.columns.append(compiler.compile(fits))
            checks.append(len(plan.columns) - 1)
            check_nodes.append(fits)
    params = dict(compiler.params)
    plan.params.update(params)
    base = backend.rules_object(
        [(k, sql, kind) for k, (sql, kind) in pairs.items()], strip=nullable
    )
    columns = f"{body}, {base} AS properties"
    ids, queue_id, max_size = f"f{number}_ids", f"f{number}_queue", f"f{number}_max_size"
    part, rows = backend.rules_made(
        number, columns, ids=ids, queue_id=queue_id, max_size=max_size, kind=action.kind
    )
    return FastInsert(
        action.queue, number, part, rows, params, stored, ids, queue_id, max_size,
        tuple(checks), tuple(check_nodes),
    )  # fmt: skip


def _off_the_trigger(  # noqa: PLR0911  (a case per kind of made body)
    expression: str, action: PlannedEnqueue
) -> tuple[Node | None] | None:
    """A computed property of a made message read off its trigger: where the property's
    expression is a path into the made body, and that body is the trigger's own or a
    ``json_object`` whose entry on the path is a path into the trigger's body, the same
    JSON value (untyped), read without parsing the made body. ``(None,)``: the made body
    has no such entry (NULL); None: only the Python path computes it."""
    node = parse(expression)
    if not (isinstance(node, Path) and node.root == "body" and node.row is None and node.steps):
        return None
    if action.kind == "same":
        return (node,)
    if action.kind in ("text", "value"):
        return (None,)  # text, or a number or boolean: no path leads into it
    if action.kind == "scalar":
        made = action.node  # the made body is the JSON value at this path of the trigger's
        if not (isinstance(made, Path) and made.root == "body" and made.row is None):
            return None
        return (replace(made, steps=made.steps + node.steps),)
    first, rest = node.steps[0], node.steps[1:]
    if not (isinstance(action.node, JsonObject) and isinstance(first, str)):
        return None
    entry = dict(action.node.items).get(first)
    if entry is None:
        return (None,)
    if not (isinstance(entry, Path) and entry.root == "body" and entry.row is None):
        return None
    return (replace(entry, steps=entry.steps + rest),)


def usable(fast: FastInsert, content: QueueContent) -> bool:
    """Whether the target still takes plain messages as when ``fast`` was built."""
    spec = content.spec
    return (
        spec.kind in ("queue", "topic")
        and spec.isolation == "none"
        and not spec.types
        and not content.priority
        and not content.values
        and spec.priority_levels is None
        and tuple(p for p, _ in content.stored) == fast.stored
    )


_Actions = list[tuple[ActionKey, "Check | None"]] | None
Shape = list[tuple[int | None, list[tuple[int | None, _Actions]]]]
"""A plan's rules as the SQL enqueue walks them: per rule its key column, per branch its
condition and its actions with their checks (None: a branch that needs the Python path)."""


@dataclass(frozen=True, slots=True)
class Check:
    """What must hold of an action's evaluated values for its SQL enqueue to be sure to
    be accepted by its target (else the Python path makes the message or the error). A
    NULL or too large body the SQL leaves out itself (see rules_made)."""

    declared: tuple[tuple[int, StoredProperty, str], ...]
    """(column, the target's property a WITH sets, the target's name)."""
    computed: tuple[int, ...] = ()
    """Columns that hold where computed properties read off the trigger have their types."""

    @classmethod
    def of(cls, action: PlannedEnqueue, content: QueueContent, fast: FastInsert) -> Check:
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


def fast_shape(
    plan: QueuePlan,
    fast: Mapping[ActionKey, FastInsert],
    contents: dict[str, QueueContent],
    content_of: Callable[[str], QueueContent],
) -> Shape | None:
    """``plan``'s Shape, or None if a target does not take plain messages now.
    ``contents``: the targets as the batch found them (filled here from ``content_of``)."""
    for made in fast.values():
        if made.queue not in contents:
            content = content_of(made.queue)
            if not usable(made, content):
                return None
            contents[made.queue] = content
    shape: Shape = []
    for r, planned in enumerate(plan.rules):
        branches: list[tuple[int | None, _Actions]] = []
        for b, branch in enumerate(planned.branches):
            actions: list[tuple[ActionKey, Check | None]] | None = []
            for a, action in enumerate(branch.actions):
                planned_fast = fast.get((r, b, a))
                if (
                    planned_fast is None
                    or not isinstance(action, PlannedEnqueue)
                    or actions is None
                ):
                    actions = None
                    continue
                check = Check.of(action, contents[planned_fast.queue], planned_fast)
                trivial = not (check.declared or check.computed)
                actions.append(((r, b, a), None if trivial else check))
            branches.append((branch.condition, actions))
        shape.append((planned.key, branches))
    return shape


def fast_choice(shape: Shape, rows: Sequence[Sequence[Any]]) -> dict[ActionKey, list[int]] | None:
    """Which triggers each action's SQL enqueue takes, or None if any message needs the
    Python path (an action without one, or a check that fails: it makes the error
    message)."""
    chosen: dict[ActionKey, list[int]] = {}
    for row in rows:
        values = row[FIXED_COLUMNS:]
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
