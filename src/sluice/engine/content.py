"""What a queue knows about its messages' content: accepted types, priority
functions and declared properties, compiled once and applied at enqueue; and the
selections (where, order_by) that consumers dequeue with."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice import expr  # its parser (sqlglot) loads at the first expression
from sluice.backends.base import SLOTS, PropertyDef, Selection, StoredProperty
from sluice.catalog import ANY_TYPE, QueueSpec
from sluice.errors import ConfigurationError, ExpressionError
from sluice.expr.nodes import Node, Prop, Type
from sluice.expr.python import Row, compile_python
from sluice.expr.scope import Scope

__all__ = ["QueueContent", "free_slot", "priority_value"]


_INT64 = 2**63


@dataclass(slots=True)
class QueueContent:
    """A queue's content rules, ready to apply (built per queue, cached with its spec)."""

    spec: QueueSpec
    properties: Sequence[PropertyDef]
    priority: Mapping[str, Callable[[Row], Any]]
    values: Sequence[tuple[int, Type, Callable[[Row], Any]]]
    """(index in the Envelope's keys, property type, evaluator) per declared property."""
    scope: Scope
    definitions: Mapping[Node, str]
    """A declared property's checked expression -> its name, to read it from its slot."""
    slots: Mapping[str, str]
    stored: Sequence[tuple[StoredProperty, Callable[[Row], Any] | None]] = ()
    """Properties carried in the properties JSON, with the evaluator of computed ones."""
    selections: dict[tuple[str | None, tuple[str, ...]], Selection] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        spec: QueueSpec,
        properties: Sequence[PropertyDef],
        stored: Sequence[StoredProperty] = (),
    ) -> QueueContent:
        priority = {
            type_name: compile_python(expr.parse(expression, want="number"))
            for type_name, expression in spec.priority
        }
        values = []
        definitions: dict[Node, str] = {}
        for p in properties:
            node = expr.parse(p.expression, want=p.type)  # type: ignore[arg-type]
            definitions[node] = p.name
            values.append((_ENVELOPE_FIELDS[p.slot], p.type, compile_python(node)))
        return cls(
            spec=spec,
            properties=properties,
            priority=priority,
            values=values,  # type: ignore[arg-type]
            scope=Scope({p.name: p.type for p in properties}),  # type: ignore[misc]
            definitions=definitions,
            slots={p.name: p.slot for p in properties},
            stored=tuple(
                (p, None if p.expression is None else compile_python(expr.parse(p.expression)))
                for p in stored
            ),
        )

    @property
    def plain(self) -> bool:
        """Nothing to check or compute at enqueue: the fast path applies."""
        return not (self.spec.types or self.priority or self.values or self.stored)

    def priority_function(self, type_name: str | None) -> Callable[[Row], Any] | None:
        if type_name is not None and type_name in self.priority:
            return self.priority[type_name]
        return self.priority.get(ANY_TYPE)

    def selection(self, where: str | None, order_by: Sequence[str] | None) -> Selection | None:
        """The checked selection for a dequeue or browse (cached per text)."""
        if where is None and not order_by:
            return None
        if isinstance(order_by, str):
            raise ExpressionError("order_by takes a list of keys, e.g. ['body.total DESC']")
        key = (where, tuple(order_by or ()))
        found = self.selections.get(key)
        if found is None:
            condition = None
            if where is not None:
                condition = self._declared(expr.parse(where, self.scope, want="boolean"))
            order = tuple(
                (self._declared(node), descending)
                for node, descending in (expr.parse_order(k, self.scope) for k in key[1])
            )
            found = Selection(repr(key), condition, order, self.slots)
            if len(self.selections) > 256:
                self.selections.clear()
            self.selections[key] = found
        return found

    def _declared(self, node: Node) -> Node:
        """``node`` with every declared property's own expression read from its slot.

        So ``body.customer.name = 'Smith'`` is an index lookup once ``customer``
        is declared as ``body.customer.name``, as if it had said ``customer``.
        """
        if not self.definitions:
            return node
        replaced: Node = _substitute(node, self.definitions)
        return replaced


def _substitute(node: Any, definitions: Mapping[Node, str]) -> Any:
    if isinstance(node, tuple):
        return tuple(_substitute(n, definitions) for n in node)
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return node
    name = definitions.get(node) if _hashable(node) else None  # type: ignore[call-overload]
    if name is not None:
        return Prop(name, node.type)  # type: ignore[attr-defined]
    changes = {
        f.name: _substitute(getattr(node, f.name), definitions) for f in dataclasses.fields(node)
    }
    return dataclasses.replace(node, **changes)


def _hashable(node: Any) -> bool:
    try:
        hash(node)
    except TypeError:
        return False
    return True


_ENVELOPE_FIELDS = {slot: n for n, slot in enumerate(SLOTS)}
"""Where each slot's value sits in an Envelope's keys."""


def priority_value(value: Any) -> int:
    """A priority function's result as a priority: rounded half away from zero, 0 if NULL."""
    if type(value) is int:
        return value if -_INT64 <= value < _INT64 else (_INT64 - 1 if value > 0 else -_INT64)
    if type(value) is not float or not math.isfinite(value):
        return 0
    rounded: int = math.floor(abs(value) + 0.5) * (1 if value >= 0 else -1)
    return max(-_INT64, min(_INT64 - 1, rounded))


def free_slot(kind: Type, taken: Sequence[str], queue: str) -> str:
    """The first free slot for a property of ``kind`` on a queue."""
    prefix = "t" if kind == "text" else "n"
    for slot in SLOTS:
        if slot.startswith(prefix) and slot not in taken:
            return slot
    raise ConfigurationError(
        f"queue {queue!r} has 4 declared {'text' if prefix == 't' else 'number'} properties "
        "already, the most it can store"
    )
