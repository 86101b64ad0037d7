"""Applying statements to an application, and every check that needs no message.

``apply_statements`` is pure: it returns the new application or raises
RuleDefinitionError with the line of the statement or expression at fault.
Whether a change is safe against the messages already stored is the runner's
question; this module answers whether the application makes sense by itself.

The checks:

- names: queues, slicings and rules use the catalog's plain names; properties
  are identifiers and not a system property; every queue, property and slicing
  a statement names exists; a slicing and a queue do not share a name (a rule
  is FOR either);
- properties: declared on at least one queue; FIXED needs a VALUE on each of
  its queues and is never set by WITH; INHERITED takes no VALUE (it is copied
  from the triggering message) and is not FIXED as well; WITH sets only
  properties declared on the target queue;
- echo queues: a KIND echo queue has the properties ``echo_target`` (text) and
  ``echo_after`` (integer or real: seconds from now) or ``echo_at`` (timestamp)
  declared on it, and an ENQUEUE into it gives ``echo_target`` and one of the
  other two (by WITH, VALUE or INHERITED); a literal ``echo_target`` names a
  declared queue. No rule is FOR an echo queue: the engine is its consumer;
- error queues exist and are not the queue the rule or queue itself feeds;
- DROP of something still used names the user;
- expressions, checked by ``sluice.expr.parse`` in the rule's scope: IF
  conditions are boolean; WITH values and VALUE expressions have their
  property's type; an ENQUEUE body is anything but a NULL literal; a RESET KEY has
  the type of the slicing's property.

Scopes. A rule's expressions may read ``queue('q')`` of every declared queue,
and, in a rule FOR a slicing, ``slice()`` and ``slicekey()``. ``property('p')``
reads the triggering message's property: ``p`` must be declared on the rule's
queue, or, for a slicing, on every queue of the slicing (so it is there whatever
message entered the slice); the system properties (``rule``, ``created_at``,
``trigger_id``, ``trigger_queue``) can always be read and are NULL on messages
no rule created. A VALUE expression is computed over the new message alone: its
body and columns and ``now()``, but no relation and no ``property()``, so
computed properties never depend on each other's order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from typing import Any, Final

from sluice.errors import RuleDefinitionError
from sluice.expr.check import Relations, Scope
from sluice.rules.check_rule import check_rule, checked_expression, known_queue, plain_name
from sluice.rules.model import (
    PROPERTY_TYPES,
    SYSTEM_PROPERTIES,
    Application,
    Drop,
    ErrorQueueDef,
    PropertyDef,
    QueueDef,
    RuleDef,
    SlicingDef,
    Statement,
)
from sluice.rules.uses import drop_users, properties_on, queues_of_slicing, rules_of

__all__ = [
    "apply_statements",
    "check_application",
    "queues_of_slicing",
    "rules_of",
    "same_definition",
]

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VALUE_SCOPE: Final = Scope(relations=Relations())
"""VALUE expressions: the new message only (no relation, no property(), no slice)."""

Definition = QueueDef | PropertyDef | SlicingDef | RuleDef


def apply_statements(current: Application, statements: Sequence[Statement]) -> Application:
    """The application after ``statements``, checked as a whole; ``current`` is unchanged.

    CREATE of a name that exists replaces its definition (an identical one, lines
    aside, changes nothing: see ``same_definition``); creating one name twice in
    ``statements`` without a DROP between is an error. DROP of an unknown name is
    an error unless IF EXISTS. Raises RuleDefinitionError for the first mistake:
    in the statements given, by line, before one in the definitions kept from
    ``current``.
    """
    app = Application(
        dict(current.queues),
        dict(current.properties),
        dict(current.slicings),
        dict(current.rules),
        current.error_queue,
    )
    created: dict[tuple[str, str], int] = {}
    drops: list[Drop] = []
    error_queue_line: int | None = None
    for statement in statements:
        if isinstance(statement, ErrorQueueDef):
            app = _with_error_queue(app, statement.queue)
            error_queue_line = statement.line
        elif isinstance(statement, Drop):
            if _drop(app, statement):
                created.pop((statement.kind, statement.name), None)
                drops.append(statement)
        else:
            key = (_kind(statement), statement.name)
            if key in created:
                raise RuleDefinitionError(
                    f"{key[0]} {key[1]!r} is created twice, at lines {created[key]} and "
                    f"{statement.line}: keep one, or DROP it in between",
                    line=statement.line,
                )
            created[key] = statement.line
            _tables(app)[key[0]][statement.name] = statement
    for drop in drops:
        _check_drop(app, drop)
    _check(app, set(created), error_queue_line)
    return app


def check_application(app: Application) -> None:
    """Raise RuleDefinitionError for the first mistake in ``app``, by line."""
    _check(app, set(), None)


def same_definition(a: Statement, b: Statement) -> bool:
    """Whether two statements define the same thing, whatever lines they are on."""
    return _shape(a) == _shape(b)


def _shape(value: object) -> object:
    if is_dataclass(value) and not isinstance(value, type):
        # Where a definition is (its line, an expression's place) is no part of it.
        parts = (
            (f.name, _shape(getattr(value, f.name)))
            for f in fields(value)
            if f.compare and f.name != "line"
        )
        return (type(value).__name__, tuple(parts))
    if isinstance(value, dict):
        return tuple(sorted((k, _shape(v)) for k, v in value.items()))
    if isinstance(value, tuple):
        return tuple(_shape(v) for v in value)
    return value


# --- applying ---------------------------------------------------------------------------
def _kind(definition: Definition) -> str:
    return {QueueDef: "queue", PropertyDef: "property", SlicingDef: "slicing", RuleDef: "rule"}[
        type(definition)
    ]


def _tables(app: Application) -> dict[str, dict[str, Any]]:
    """The application's definitions by kind ("queue", ...), each table by name."""
    return {
        "queue": app.queues,
        "property": app.properties,
        "slicing": app.slicings,
        "rule": app.rules,
    }


def _with_error_queue(app: Application, queue: str) -> Application:
    return Application(app.queues, app.properties, app.slicings, app.rules, queue)


def _drop(app: Application, drop: Drop) -> bool:
    """Remove what ``drop`` names; False when IF EXISTS found nothing."""
    table = _tables(app)[drop.kind]
    if drop.name not in table:
        if drop.if_exists:
            return False
        raise RuleDefinitionError(
            f"DROP {drop.kind.upper()} {drop.name}: there is no {drop.kind} {drop.name!r} "
            "(DROP ... IF EXISTS drops only what is there)",
            line=drop.line,
        )
    del table[drop.name]
    return True


def _check_drop(app: Application, drop: Drop) -> None:
    users = drop_users(app, drop.kind, drop.name)
    if users:
        shown = "; ".join(users[:5]) + ("; ..." if len(users) > 5 else "")
        raise RuleDefinitionError(
            f"cannot drop {drop.kind} {drop.name!r}: {shown}; drop or change those first",
            line=drop.line,
        )


# --- checking ---------------------------------------------------------------------------
def _check(app: Application, fresh: set[tuple[str, str]], error_queue_line: int | None) -> None:
    """Run every check; raise the first error, the statements just given first."""
    found: list[tuple[bool, int, RuleDefinitionError]] = []
    if app.error_queue is not None and app.error_queue not in app.queues:
        error = RuleDefinitionError(
            f"SET ERRORQUEUE {app.error_queue}: there is no queue {app.error_queue!r}",
            line=error_queue_line,
        )
        found.append((error_queue_line is None, error_queue_line or 0, error))
    definitions: list[Definition] = [
        *app.queues.values(),
        *app.properties.values(),
        *app.slicings.values(),
        *app.rules.values(),
    ]
    for definition in definitions:
        try:
            _check_definition(app, definition)
        except RuleDefinitionError as exc:
            old = (_kind(definition), definition.name) not in fresh
            found.append((old, exc.line or 0, exc))
    if found:
        raise min(found, key=lambda f: f[:2])[2]


def _check_definition(app: Application, definition: Definition) -> None:
    if isinstance(definition, QueueDef):
        _check_queue(app, definition)
    elif isinstance(definition, PropertyDef):
        _check_property(app, definition)
    elif isinstance(definition, SlicingDef):
        _check_slicing(app, definition)
    else:
        check_rule(app, definition)


def _check_queue(app: Application, queue: QueueDef) -> None:
    plain_name(queue.name, "queue", queue.line)
    for type_name in queue.types:
        plain_name(type_name, "message type", queue.line)
    if not queue.retention >= 0:
        raise RuleDefinitionError(
            f"queue {queue.name!r}: RETENTION must be a duration >= 0", line=queue.line
        )
    if queue.error_queue is not None:
        known_queue(app, queue.error_queue, f"queue {queue.name!r} ERRORQUEUE", queue.line)
        if queue.error_queue == queue.name:
            raise RuleDefinitionError(
                f"queue {queue.name!r} is its own ERRORQUEUE: a failing message would fail "
                "again in it; name another queue",
                line=queue.line,
            )
    if queue.kind == "echo":
        _check_echo_queue(app, queue)


def _check_echo_queue(app: Application, queue: QueueDef) -> None:
    declared = {p.name: p.type for p in properties_on(app, queue.name)}
    right = (
        declared.get("echo_target") == "text"
        and declared.get("echo_after", "integer") in ("integer", "real")
        and declared.get("echo_at", "timestamp") == "timestamp"
        and ("echo_after" in declared or "echo_at" in declared)
    )
    if not right:
        raise RuleDefinitionError(
            f"echo queue {queue.name!r} needs the properties echo_target (text) and echo_after "
            "(integer or real, seconds) or echo_at (timestamp) declared on it, e.g. "
            f"CREATE PROPERTY echo_target AS text QUEUE {queue.name}",
            line=queue.line,
        )


def _check_property(app: Application, prop: PropertyDef) -> None:
    where = f"property {prop.name!r}"
    if not _IDENTIFIER.fullmatch(prop.name):
        raise RuleDefinitionError(
            f"{where}: a property's name is an identifier ([A-Za-z_][A-Za-z0-9_]*)", line=prop.line
        )
    if prop.name in SYSTEM_PROPERTIES:
        raise RuleDefinitionError(
            f"{where} is a system property, set by sluice on every message a rule creates; "
            "choose another name",
            line=prop.line,
        )
    if prop.type not in PROPERTY_TYPES:
        raise RuleDefinitionError(f"{where}: unknown type {prop.type!r}", line=prop.line)
    if not prop.values:
        raise RuleDefinitionError(f"{where} is declared on no queue", line=prop.line)
    if prop.fixed and prop.inherited:
        raise RuleDefinitionError(
            f"{where} is FIXED and INHERITED: a fixed property is computed by its VALUE, an "
            "inherited one copied from the triggering message; choose one",
            line=prop.line,
        )
    for queue, value in prop.values.items():
        known_queue(app, queue, f"{where} QUEUE", prop.line)
        if prop.fixed and value is None:
            raise RuleDefinitionError(
                f"{where} is FIXED but has no VALUE on queue {queue!r}", line=prop.line
            )
        if prop.inherited and value is not None:
            raise RuleDefinitionError(
                f"{where} is INHERITED (copied from the triggering message): it takes no VALUE",
                line=value.line,
            )
        if value is not None:
            checked_expression(value, PROPERTY_TYPES[prop.type], _VALUE_SCOPE, f"{where} VALUE")


def _check_slicing(app: Application, slicing: SlicingDef) -> None:
    plain_name(slicing.name, "slicing", slicing.line)
    if slicing.property not in app.properties:
        raise RuleDefinitionError(
            f"slicing {slicing.name!r} is ON {slicing.property!r}, which is not a property",
            line=slicing.line,
        )
    if slicing.name in app.queues:
        raise RuleDefinitionError(
            f"slicing {slicing.name!r} has a queue's name: a rule FOR it would be ambiguous; "
            "rename one",
            line=slicing.line,
        )
