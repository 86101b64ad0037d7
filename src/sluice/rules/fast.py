"""Enqueues built by SQL: the messages a batch's rules produce, made by the database.

Where a queue's rules read no relation and reset no slice (a batch is evaluated at
once), and a rule's target takes plain messages (no types, priority functions,
slotted properties, isolation or computed integers), every message a batch's actions
produce is made by one ``INSERT ... SELECT`` over their triggering messages (each
action a part of it): body, properties (inherited, WITH, system) and the target's
computed properties are SQL, and Python only decides which triggers chose which
branch and checks what could fail (a NULL body, a size, a WITH value's type).
Anything else, or any check that fails, takes the Python path, which makes the error
messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.backends.base import Backend
from sluice.backends.records import StoredProperty
from sluice.engine.content import QueueContent
from sluice.expr import parse
from sluice.rules.model import PROPERTY_TYPES, Application
from sluice.rules.plan import PlannedEnqueue, QueuePlan

__all__ = ["ActionKey", "FastInsert", "build_fast", "usable"]

ActionKey = tuple[int, int, int]
"""(rule, branch, action) in a queue's plan."""

_MAX_ACTIONS = 64
"""p_num is trigger id * 64 + the action's number."""

_ROW_COLUMNS = (
    ", 0 AS priority, {now} AS enqueued_at, {now} AS available_at,"
    " CAST(NULL AS DOUBLE PRECISION) AS expires_at, 0 AS attempts, CAST(NULL AS TEXT) AS type,"
    " CAST(NULL AS TEXT) AS correlation_id, CAST(NULL AS TEXT) AS reply_to"
)
"""The rest of a new message's fields, for computed properties that read them."""


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


def build_fast(app: Application, backend: Backend, plan: QueuePlan) -> dict[ActionKey, FastInsert]:
    """The SQL enqueue of every action of ``plan`` that can have one."""
    if plan.sequential:
        return {}
    found: dict[ActionKey, FastInsert] = {}
    number = 0
    for r, planned in enumerate(plan.rules):
        for b, branch in enumerate(planned.branches):
            for a, action in enumerate(branch.actions):
                number += 1
                if isinstance(action, PlannedEnqueue) and number < _MAX_ACTIONS:
                    fast = _insert(app, backend, plan, planned.rule.name, action, number)
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
    # Typed: PostgreSQL cannot tell a bare parameter's type inside jsonb_build_object.
    now = f"CAST({compiler.placeholder('now')} AS DOUBLE PRECISION)"
    pairs: dict[str, tuple[str, str]] = {}
    for name, prop in app.properties.items():
        if prop.inherited and action.queue in prop.values:
            pairs[name] = (backend.rules_inherited(name), "json")
    for name, column in action.properties:
        declared = app.properties.get(name)
        kind = PROPERTY_TYPES[declared.type] if declared is not None else "text"
        pairs[name] = (plan.columns[column], kind)
    nullable = bool(pairs)  # inherited and WITH values may be NULL: left out
    pairs["rule"] = (f"CAST({compiler.bind(rule)} AS TEXT)", "text")
    pairs["created_at"] = (now, "number")
    pairs["trigger_id"] = ("m.id", "number")
    pairs["trigger_queue"] = (f"CAST({compiler.bind(plan.name)} AS TEXT)", "text")
    base = backend.rules_object(
        [(k, sql, kind) for k, (sql, kind) in pairs.items()], strip=nullable
    )
    values = backend.rules_compiler(None, prefix=f"v{number}_", alias="n")
    computed = [
        (p.name, values.compile(parse(p.expression, want=PROPERTY_TYPES[p.type])), p.type)
        for p in stored
        if p.expression is not None
    ]
    params = {**compiler.params, **values.params}
    value = "n.properties"
    if computed:
        obj = backend.rules_object(
            [
                (name, sql, "boolean" if kind == "boolean" else "value")
                for name, sql, kind in computed
            ],
            strip=False,
        )
        disjoint = not {name for name, _, _ in computed} & pairs.keys()
        value = backend.rules_merge(obj, "n.properties", disjoint=disjoint)
    columns = f"{body}, {base} AS properties{_ROW_COLUMNS.format(now=now)}"
    ids, queue_id = f"f{number}_ids", f"f{number}_queue"
    part, rows = backend.rules_made(number, columns, value, ids=ids, queue_id=queue_id)
    return FastInsert(action.queue, number, part, rows, params, stored, ids, queue_id)


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
