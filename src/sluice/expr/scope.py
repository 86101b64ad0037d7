"""What an expression may name besides the message's own fields: a queue's declared
properties (``Scope``) and, in rules, other messages (``Relations``).

Apart from the parser (sluice.expr.check), so that a queue's scope is built without
loading sqlglot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sluice.expr.nodes import Type

__all__ = ["Relations", "Scope"]


@dataclass(frozen=True, slots=True)
class Relations:
    """What a rule's expressions may read besides the triggering message (sluice.rules).

    ``queue('q')`` is the messages kept in a declared queue, processed or not;
    ``slice()`` the messages of the triggering message's slice since its last reset,
    across the slicing's queues, and ``slicekey()`` that slice's key. Relations are
    used in EXISTS (SELECT ... FROM rel AS a WHERE ...), in scalar subqueries
    ((SELECT count(*) FROM rel AS a WHERE ...)) and in count(rel).
    """

    queues: frozenset[str] = frozenset()
    """The queues queue('q') may name."""
    slicing: str | None = None
    """The slicing the rule is for (slice() and slicekey() allowed); None: refused."""
    slice_type: Type | None = None
    """The type of the slicing's property (slicekey()'s type)."""
    slice_property: str | None = None
    """The property the slicing is on."""
    properties: Mapping[str, Type] = field(default_factory=dict)
    """Declared rule properties: property('p') reads the triggering message's, and
    ``props.p`` (of any message) reads as this type. The system properties are read
    only if they are listed here too."""
    trigger_queue: str | None = None
    """The queue of the triggering message, read as the name ``queue`` (a constant per
    queue: rules are compiled for each queue they process, those for a slicing too)."""


@dataclass(frozen=True, slots=True)
class Scope:
    """The names an expression may use beyond the message's own fields."""

    properties: Mapping[str, Type] = field(default_factory=dict)
    """Declared properties and their types."""
    relations: Relations | None = None
    """A rule's reach beyond the triggering message (sluice.rules); None outside rules:
    then property(), slicekey(), relations and body constructors are refused, and
    now() is the wall clock (in rules: the engine clock, the parameter ``now``)."""
