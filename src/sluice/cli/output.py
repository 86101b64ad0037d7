"""What the ``sluice`` commands print: aligned tables for people, JSON for scripts, ages and
times written one way everywhere."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sluice.message import Message

__all__ = ["age", "emit", "message_dict", "note", "table", "when"]


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """Print ``data`` as JSON with ``--json``, else ``text``."""
    print(json.dumps(data, default=str) if args.json else text)


def note(text: str) -> None:
    """A line for the person at the terminal, on stderr so that stdout stays the data."""
    print(f"sluice: {text}", file=sys.stderr, flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, empty: str) -> str:
    """``rows`` under ``headers`` in aligned columns; numbers to the right, ``empty`` if none.

    As ``rabbitmqadmin list queues`` and sqlite-utils' ``--table`` show them: one header
    line, two spaces between columns, no trailing blanks.
    """
    if not rows:
        return empty
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [
        all(isinstance(row[i], int | float) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers), *cells]:
        padded = [
            v.rjust(w) if numeric[i] else v.ljust(w)
            for i, (v, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def age(seconds: float) -> str:
    """A duration for people: ``0s``, ``42s``, ``3m05s``, ``2h07m``, ``4d03h``."""
    s = int(max(seconds, 0.0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def when(epoch: float | None) -> str | None:
    """An epoch time as ISO 8601 in UTC (what ``--json`` prints for every time), or None."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def message_dict(m: Message, *, state: str | None = None) -> dict[str, Any]:
    """A message for ``--json``; ``state`` overrides the one it was taken in (``done`` once a
    command acknowledged it)."""
    body = m.body if not isinstance(m.body, bytes) else m.body.hex()
    return {
        "id": m.id,
        "queue": m.queue,
        "priority": m.priority,
        "state": state or m.state.name.lower(),
        "attempts": m.attempts,
        "content_type": m.content_type,
        "enqueued_at": m.enqueued_at.isoformat(),
        "properties": m.properties,
        "error": m.error,
        "type": m.type,
        "group": m.group,
        "body": body,
    }
