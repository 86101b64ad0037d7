"""Deciding: what a plan's rules do for one message, from its evaluated row.

The rules' semantics without the database: which branch each rule takes, the resets
it asks for, and the envelopes of the messages it makes (bodies shaped by how they were
built, inherited, WITH and system properties, echo times). A failure of one message's
rules is its Failure, for the batch to turn into an error message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.backends.base import Envelope
from sluice.engine.observe import TRACE_PROPERTIES
from sluice.errors import StorageError
from sluice.expr.python_rules import json_number
from sluice.expr.xml import parse_xml
from sluice.message import JSON, XML, decode_json, is_json, is_xml
from sluice.rules.failures import Failure, failure_of
from sluice.rules.model import Application, RuleDef
from sluice.rules.outcome import FIXED_COLUMNS
from sluice.rules.plan import PlannedEnqueue, PlannedReset, PlannedRule, QueuePlan

__all__ = ["Actions", "Decider", "MakeEnvelope", "Trigger", "echo_time", "read_trigger"]

MakeEnvelope = Callable[[str, Any, "str | None", dict[str, Any], float], Envelope]
"""The batch's maker of an envelope: (queue, body, content type, properties, available
at), numbered in the batch and typed by the target queue."""


@dataclass(frozen=True, slots=True)
class Trigger:
    id: int
    queue: str
    properties: dict[str, Any]
    content_type: str
    body: Any
    """The body as a rule forwards it: JSON decoded, text and XML as str, else bytes."""


@dataclass(slots=True)
class Actions:
    resets: list[tuple[str, str]] = field(default_factory=list)
    envelopes: list[Envelope] = field(default_factory=list)


def read_trigger(row: Sequence[Any], queue: str) -> Trigger:
    """The triggering message of an evaluated row (rules_evaluate's layout), of ``queue``."""
    ref, properties, content_type, text, data = row[:FIXED_COLUMNS]
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
    return Trigger(int(ref), queue, props, content_type, body)


class Decider:
    """The rules of a batch's plans applied to evaluated rows, at the batch's ``now``."""

    def __init__(
        self, app: Application, now: float, make: MakeEnvelope, *, traced: bool = False
    ) -> None:
        self.app = app
        self.now = now
        self._make = make
        self._traced = traced
        """Telemetry is on: a made message inherits its trigger's trace context."""

    def decide(self, plan: QueuePlan, row: Sequence[Any]) -> Actions | Failure:
        """What ``plan``'s rules do for one message: its resets and envelopes, or its
        failure."""
        trigger = read_trigger(row, plan.name)
        actions = Actions()
        for planned in plan.rules:
            try:
                self._rule(planned, row, trigger, actions)
            except StorageError:
                raise  # the database's: the part is done again a message at a time
            except Exception as exc:  # any other, sluice's or not: this message's error
                return failure_of(exc, planned.rule)
        return actions

    def _rule(
        self, planned: PlannedRule, row: Sequence[Any], trigger: Trigger, actions: Actions
    ) -> None:
        values = row[FIXED_COLUMNS:]
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
        self, rule: RuleDef, action: PlannedEnqueue, values: Sequence[Any], trigger: Trigger
    ) -> Envelope:
        body, content_type = self._body(rule, action, values, trigger)
        target = self.app.queues.get(action.queue)
        properties: dict[str, Any] = {}
        if self._traced:
            for name in TRACE_PROPERTIES:
                if name in trigger.properties:
                    properties[name] = trigger.properties[name]
        for name, prop in self.app.properties.items():
            if prop.inherited and action.queue in prop.values and name in trigger.properties:
                properties[name] = trigger.properties[name]
        for name, column in action.properties:
            value = values[column]
            if value is None:
                properties.pop(name, None)
            else:
                properties[name] = _json_value(value, self.app, name)
        properties |= self.origin(trigger, rule)
        available = self.now
        if target is not None and target.kind == "echo":
            available = echo_time(properties, self.now)
        return self._make(action.queue, body, content_type, properties, available)

    def _body(
        self, rule: RuleDef, action: PlannedEnqueue, values: Sequence[Any], trigger: Trigger
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

    def origin(self, trigger: Trigger, rule: RuleDef | None) -> dict[str, Any]:
        """The system properties of a message made while processing ``trigger``."""
        origin: dict[str, Any] = {
            "created_at": self.now,
            "trigger_id": trigger.id,
            "trigger_queue": trigger.queue,
        }
        if rule is not None:
            origin["rule"] = rule.name
        return origin


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


def echo_time(properties: Mapping[str, Any], since: float) -> float:
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
