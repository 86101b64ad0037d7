"""An application as the database keeps it: JSON, read back into the same model.

Every engine that runs the rules reads the application from the database (not
from a file), so an apply in one process reaches `sluice run` in another.
"""

from __future__ import annotations

import json
import math
from typing import Any

from sluice.errors import ConfigurationError
from sluice.rules.model import (
    Action,
    Application,
    Branch,
    Enqueue,
    Expr,
    GatewayDef,
    PropertyDef,
    QueueDef,
    Reset,
    RuleDef,
    SlicingDef,
)

__all__ = ["decode", "encode"]

FORMAT = 1
"""The JSON's layout; a newer one is refused by an older sluice instead of misread."""


def encode(app: Application) -> str:
    """``app`` as JSON text."""
    return json.dumps(
        {
            "format": FORMAT,
            "error_queue": app.error_queue,
            "queues": [_queue(q) for q in app.queues.values()],
            "properties": [_property(p) for p in app.properties.values()],
            "slicings": [[s.name, s.property, s.line] for s in app.slicings.values()],
            "rules": [_rule(r) for r in app.rules.values()],
        },
        separators=(",", ":"),
    )


def decode(text: str) -> Application:
    """The application ``encode`` wrote."""
    data = json.loads(text)
    if data.get("format") != FORMAT:
        raise ConfigurationError(
            f"the rules application was stored in format {data.get('format')!r}, which this "
            "version of sluice does not read; upgrade sluice"
        )
    queues = [
        QueueDef(
            **{
                **q,
                "types": tuple(q["types"]),
                "retention": _seconds(q["retention"]),
                "gateway": _gateway(q.get("gateway")),
            }
        )
        for q in data["queues"]
    ]
    properties = [
        PropertyDef(
            name=p["name"],
            type=p["type"],
            line=p["line"],
            values={q: None if v is None else _expr(v) for q, v in p["values"].items()},
            fixed=p["fixed"],
            inherited=p["inherited"],
        )
        for p in data["properties"]
    ]
    slicings = [SlicingDef(name, prop, line) for name, prop, line in data["slicings"]]
    rules = [
        RuleDef(
            name=r["name"],
            target=r["target"],
            line=r["line"],
            branches=tuple(
                Branch(
                    None if b["if"] is None else _expr(b["if"]),
                    tuple(_action(a) for a in b["then"]),
                )
                for b in r["branches"]
            ),
            error_queue=r["error_queue"],
        )
        for r in data["rules"]
    ]
    return Application(
        queues={q.name: q for q in queues},
        properties={p.name: p for p in properties},
        slicings={s.name: s for s in slicings},
        rules={r.name: r for r in rules},
        error_queue=data["error_queue"],
    )


def _gateway(stored: list[Any] | None) -> GatewayDef | None:
    if stored is None:
        return None
    direction, transport, settings = stored
    return GatewayDef(direction, transport, tuple((k, v) for k, v in settings))


def _queue(q: QueueDef) -> dict[str, Any]:
    return {
        "name": q.name,
        "line": q.line,
        "kind": q.kind,
        "mode": q.mode,
        "priority": q.priority,
        "types": list(q.types),
        "error_queue": q.error_queue,
        # JSON has no infinity (PostgreSQL's jsonb refuses Python's Infinity).
        "retention": "forever" if math.isinf(q.retention) else q.retention,
        "gateway": None
        if q.gateway is None
        else [q.gateway.direction, q.gateway.transport, [list(s) for s in q.gateway.settings]],
    }


def _property(p: PropertyDef) -> dict[str, Any]:
    return {
        "name": p.name,
        "type": p.type,
        "line": p.line,
        "values": {q: None if e is None else _expr_json(e) for q, e in p.values.items()},
        "fixed": p.fixed,
        "inherited": p.inherited,
    }


def _rule(r: RuleDef) -> dict[str, Any]:
    return {
        "name": r.name,
        "target": r.target,
        "line": r.line,
        "error_queue": r.error_queue,
        "branches": [
            {
                "if": None if b.condition is None else _expr_json(b.condition),
                "then": [_action_json(a) for a in b.actions],
            }
            for b in r.branches
        ],
    }


def _action_json(a: Action) -> dict[str, Any]:
    if isinstance(a, Enqueue):
        return {
            "enqueue": _expr_json(a.body),
            "into": a.queue,
            "with": [[name, _expr_json(e)] for name, e in a.properties],
        }
    return {
        "reset": a.slicing,
        "key": None if a.key is None else _expr_json(a.key),
        "line": a.line,
    }


def _action(data: dict[str, Any]) -> Action:
    if "enqueue" in data:
        return Enqueue(
            _expr(data["enqueue"]),
            data["into"],
            tuple((name, _expr(e)) for name, e in data["with"]),
        )
    return Reset(data["reset"], None if data["key"] is None else _expr(data["key"]), data["line"])


def _seconds(value: float | str) -> float:
    return math.inf if value == "forever" else float(value)


def _expr_json(e: Expr) -> list[Any]:
    """[text, line], and its place in the file (column, source, runs) when it has one:
    an engine that finds a mistake the apply did not shows the file's line too."""
    if not e.runs:
        return [e.text, e.line]
    return [e.text, e.line, e.column, e.source, [list(run) for run in e.runs]]


def _expr(data: list[Any]) -> Expr:
    if len(data) == 2:  # not read from a file, or stored by an older sluice
        return Expr(data[0], data[1])
    text, line, column, source, runs = data
    return Expr(text, line, column, source, tuple((at, start) for at, start in runs))
