"""The checks of one rule: its target, its error queue, its branches and actions, and
their expressions in the rule's scope (see ``sluice.rules.check`` for the scopes)."""

from __future__ import annotations

import re
from typing import Final

from sluice.catalog import check_name
from sluice.errors import (
    ConfigurationError,
    ExpressionError,
    MissingDependency,
    RuleDefinitionError,
)
from sluice.expr.check import Relations, Scope, parse
from sluice.expr.nodes import Lit, Node, Type
from sluice.rules.model import (
    PROPERTY_TYPES,
    SYSTEM_PROPERTIES,
    Application,
    Enqueue,
    Expr,
    Reset,
    RuleDef,
    SlicingDef,
)
from sluice.rules.placed import expression_error
from sluice.rules.uses import properties_on, queues_of_slicing

__all__ = ["check_rule", "checked_expression", "known_queue", "plain_name"]

_TEXT_LITERAL: Final = re.compile(r"'((?:[^']|'')*)'")


def plain_name(name: str, what: str, line: int) -> None:
    """Raise unless ``name`` is a plain name, as the catalog takes for queues and types."""
    try:
        check_name(name, what)
    except ConfigurationError as exc:
        raise RuleDefinitionError(str(exc), line=line) from None


def known_queue(app: Application, queue: str, where: str, line: int) -> None:
    """Raise unless ``queue`` is declared; ``where`` says who names it."""
    if queue not in app.queues:
        raise RuleDefinitionError(f"{where}: there is no queue {queue!r}", line=line)


def checked_expression(expr: Expr, want: Type | None, scope: Scope, where: str) -> Node:
    """``expr`` parsed and checked; an ExpressionError becomes a RuleDefinitionError at the
    file's line and column of the mistake, showing the file's line with a caret under it
    (``sluice.rules.placed``), and a MissingDependency (XPath without lxml) names the line
    too."""
    try:
        return parse(expr.text, scope, want=want)
    except ExpressionError as exc:
        raise expression_error(expr, exc, where) from exc
    except MissingDependency as exc:
        raise MissingDependency(f"line {expr.line}: {where}: {exc}") from None


def check_rule(app: Application, rule: RuleDef) -> None:
    """Raise RuleDefinitionError for the first mistake in ``rule``."""
    plain_name(rule.name, "rule", rule.line)
    where = f"rule {rule.name!r}"
    slicing, triggers = _triggers(app, rule, where)
    if rule.error_queue is not None:
        known_queue(app, rule.error_queue, f"{where} ERRORQUEUE", rule.line)
        if rule.error_queue in triggers:
            raise RuleDefinitionError(
                f"{where} has ERRORQUEUE {rule.error_queue!r}, a queue it processes: its "
                "errors would trigger it again; name another queue",
                line=rule.line,
            )
    if not rule.branches or any(b.condition is None for b in rule.branches[:-1]):
        raise RuleDefinitionError(
            f"{where}: only the last branch may go without a condition", line=rule.line
        )
    scope = _rule_scope(app, slicing, triggers)
    for branch in rule.branches:
        if not branch.actions:
            raise RuleDefinitionError(f"{where}: a branch without actions", line=rule.line)
        if branch.condition is not None:
            checked_expression(branch.condition, "boolean", scope, f"{where} IF condition")
        for action in branch.actions:
            if isinstance(action, Enqueue):
                _check_enqueue(app, where, action, scope)
            else:
                _check_reset(app, where, action, scope, slicing)


def _triggers(app: Application, rule: RuleDef, where: str) -> tuple[SlicingDef | None, list[str]]:
    """The slicing the rule is for (None: a queue), and the queues whose messages it
    processes."""
    slicing = app.slicings.get(rule.target)
    if slicing is not None:
        if slicing.property not in app.properties:
            # The slicing's own check reports it too; every definition is checked, and
            # without the property slice() and slicekey() here cannot be (an assert failed).
            raise RuleDefinitionError(
                f"{where} is FOR slicing {slicing.name!r}, which is ON {slicing.property!r}, "
                "not a property",
                line=rule.line,
            )
        return slicing, queues_of_slicing(app, slicing.name)
    queue = app.queues.get(rule.target)
    if queue is None:
        raise RuleDefinitionError(
            f"{where} is FOR {rule.target!r}, which is neither a queue nor a slicing",
            line=rule.line,
        )
    if queue.kind == "echo":
        raise RuleDefinitionError(
            f"{where} is FOR echo queue {rule.target!r}, whose messages the engine "
            "forwards: attach the rule to the echo's target queue",
            line=rule.line,
        )
    if queue.gateway is not None and queue.gateway.direction == "out":
        raise RuleDefinitionError(
            f"{where} is FOR outgoing gateway {rule.target!r}, whose messages its "
            f"{queue.gateway.transport} transport sends: attach the rule to a queue that "
            "feeds it",
            line=rule.line,
        )
    return None, [queue.name]


def _rule_scope(app: Application, slicing: SlicingDef | None, triggers: list[str]) -> Scope:
    readable: dict[str, Type] = dict(SYSTEM_PROPERTIES)
    on_every_queue = [p for p in app.properties.values() if all(q in p.values for q in triggers)]
    readable.update((p.name, PROPERTY_TYPES[p.type]) for p in on_every_queue)
    slice_property = app.properties.get(slicing.property) if slicing else None
    return Scope(
        relations=Relations(
            queues=frozenset(app.queues),
            slicing=slicing.name if slicing else None,
            slice_type=PROPERTY_TYPES[slice_property.type] if slice_property else None,
            slice_property=slice_property.name if slice_property else None,
            properties=readable,
            # Checked as one of them: ``queue`` is text whichever it is.
            trigger_queue=triggers[0] if triggers else None,
        )
    )


def _check_enqueue(app: Application, where: str, action: Enqueue, scope: Scope) -> None:
    line = action.body.line
    known_queue(app, action.queue, f"{where} ENQUEUE ... INTO", line)
    body = checked_expression(action.body, None, scope, f"{where} ENQUEUE body")
    if isinstance(body, Lit) and body.value is None:
        raise RuleDefinitionError(f"{where}: ENQUEUE NULL: a message needs a body", line=line)
    for name, value in action.properties:
        prop = app.properties.get(name)
        if name in SYSTEM_PROPERTIES:
            raise RuleDefinitionError(
                f"{where}: {name!r} is a system property, set by sluice; it cannot be set",
                line=value.line,
            )
        if prop is None or action.queue not in prop.values:
            raise RuleDefinitionError(
                f"{where}: property {name!r} is not declared on queue {action.queue!r}",
                line=value.line,
            )
        if prop.fixed:
            raise RuleDefinitionError(
                f"{where}: property {name!r} is FIXED (computed by its VALUE); it cannot be set "
                "WITH a value",
                line=value.line,
            )
        checked_expression(value, PROPERTY_TYPES[prop.type], scope, f"{where} WITH {name}")
    if app.queues[action.queue].kind == "echo":
        _check_echo_enqueue(app, where, action)


def _check_echo_enqueue(app: Application, where: str, action: Enqueue) -> None:
    given = {name for name, _ in action.properties}
    for prop in properties_on(app, action.queue):
        if prop.values[action.queue] is not None or prop.inherited:
            given.add(prop.name)
    if "echo_target" not in given or not given & {"echo_after", "echo_at"}:
        raise RuleDefinitionError(
            f"{where}: ENQUEUE INTO echo queue {action.queue!r} needs echo_target and "
            "echo_after or echo_at: add WITH echo_target = 'queue', echo_after = seconds",
            line=action.body.line,
        )
    for name, value in action.properties:
        literal = _TEXT_LITERAL.fullmatch(value.text)
        if name == "echo_target" and literal:
            target = literal.group(1).replace("''", "'")
            known_queue(app, target, f"{where} echo_target", value.line)


def _check_reset(
    app: Application, where: str, action: Reset, scope: Scope, current: SlicingDef | None
) -> None:
    if action.slicing is None:
        if current is None:
            raise RuleDefinitionError(
                f"{where}: a bare RESET resets the current slice, which only a rule FOR a "
                "slicing has; name one: RESET slicing [KEY expr]",
                line=action.line,
            )
        return
    slicing = app.slicings.get(action.slicing)
    if slicing is None:
        raise RuleDefinitionError(
            f"{where}: RESET {action.slicing}: there is no slicing {action.slicing!r}",
            line=action.line,
        )
    prop = app.properties.get(slicing.property)
    if prop is None:
        # The slicing's own check reports this too; every definition is checked, so a
        # rule that resets it must not fail with a KeyError first.
        raise RuleDefinitionError(
            f"{where}: RESET {slicing.name}: the slicing is ON {slicing.property!r}, which is "
            "not a property",
            line=action.line,
        )
    if action.key is not None:
        checked_expression(action.key, PROPERTY_TYPES[prop.type], scope, f"{where} RESET KEY")
        return
    relations = scope.relations
    if relations is None or prop.name not in relations.properties:
        raise RuleDefinitionError(
            f"{where}: RESET {slicing.name} without KEY takes the triggering message's "
            f"{prop.name!r}, which not every message the rule processes has; add KEY expr",
            line=action.line,
        )
