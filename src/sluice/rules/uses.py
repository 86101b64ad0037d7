"""Who uses what in a rules application: the rules a queue's messages run, a slicing's
queues, a queue's properties, and what still needs a definition about to be dropped."""

from __future__ import annotations

from typing import Literal

from sluice.errors import RuleDefinitionError
from sluice.rules.model import Application, Enqueue, PropertyDef, Reset, RuleDef

__all__ = ["drop_users", "properties_on", "queues_of_slicing", "rules_of"]


def rules_of(app: Application, queue: str) -> list[RuleDef]:
    """The rules that process the messages of ``queue``, in statement order: those FOR
    it and those FOR a slicing on a property the queue has.

    None for an echo queue (the engine forwards its messages; once forwarded they
    are the target queue's) or a queue the application does not declare.
    """
    declared = app.queues.get(queue)
    if declared is None or declared.kind == "echo":
        return []
    mine = {p.name for p in properties_on(app, queue)}
    slicings = {s.name for s in app.slicings.values() if s.property in mine}
    return [r for r in app.rules.values() if r.target == queue or r.target in slicings]


def queues_of_slicing(app: Application, slicing: str) -> list[str]:
    """The queues whose messages belong to the slices of ``slicing``: every queue that
    has its property, in the order the property names them (echo queues included:
    their messages are in the slice, though they trigger no rule)."""
    declared = app.slicings.get(slicing)
    if declared is None:
        raise RuleDefinitionError(f"there is no slicing {slicing!r}")
    prop = app.properties.get(declared.property)
    return list(prop.values) if prop is not None else []


def properties_on(app: Application, queue: str) -> list[PropertyDef]:
    """The properties declared on ``queue``."""
    return [p for p in app.properties.values() if queue in p.values]


def drop_users(
    app: Application, kind: Literal["rule", "slicing", "property", "queue"], name: str
) -> list[str]:
    """What in ``app`` still names the ``kind`` called ``name`` (each as "rule r ...
    (line n)"); empty when it may go. Expressions are not searched: their checks
    report a relation or property() that is gone."""
    if kind == "queue":
        return _queue_users(app, name)
    if kind == "property":
        users = [
            f"slicing {s.name!r} is on it (line {s.line})"
            for s in app.slicings.values()
            if s.property == name
        ]
        for rule in app.rules.values():
            for action in _actions(rule):
                if isinstance(action, Enqueue) and any(p == name for p, _ in action.properties):
                    users.append(f"rule {rule.name!r} sets it (line {action.body.line})")
        return users
    if kind == "slicing":
        users = [
            f"rule {r.name!r} is for it (line {r.line})"
            for r in app.rules.values()
            if r.target == name
        ]
        for rule in app.rules.values():
            for action in _actions(rule):
                if isinstance(action, Reset) and action.slicing == name:
                    users.append(f"rule {rule.name!r} resets it (line {action.line})")
        return users
    return []


def _queue_users(app: Application, name: str) -> list[str]:
    users = [
        f"queue {q.name!r} has it as ERRORQUEUE (line {q.line})"
        for q in app.queues.values()
        if q.error_queue == name
    ]
    users += [
        f"property {p.name!r} is declared on it (line {p.line})" for p in properties_on(app, name)
    ]
    if app.error_queue == name:
        users.append("it is the file's error queue (SET ERRORQUEUE)")
    for rule in app.rules.values():
        if rule.target == name:
            users.append(f"rule {rule.name!r} is for it (line {rule.line})")
        if rule.error_queue == name:
            users.append(f"rule {rule.name!r} has it as ERRORQUEUE (line {rule.line})")
        for action in _actions(rule):
            if isinstance(action, Enqueue) and action.queue == name:
                users.append(f"rule {rule.name!r} enqueues into it (line {action.body.line})")
    return users


def _actions(rule: RuleDef) -> list[Enqueue | Reset]:
    return [action for branch in rule.branches for action in branch.actions]
