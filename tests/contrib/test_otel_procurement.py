"""The trace of one offer request through the procurement example (src/sluice/demo/
procurement.py and procurement.rules), as docs/observability.md shows it: this test runs
the example with telemetry on and checks the tree there is the one it makes.
``python -m tests.contrib.test_otel_procurement`` prints it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan

import sluice
from sluice.demo.procurement import run_procurement_demo

from .otel_support import Telemetry

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def procurement_tree() -> str:
    """The spans of the first offer request's trace, and those linked to them, as a tree."""
    telemetry = Telemetry.make()
    with sluice.connect("memory://") as db:
        telemetry.instrument(db)
        assert run_procurement_demo(db).ok
    spans = telemetry.spans()
    root = next(s for s in spans if s.name == "send offerRequests")
    return "\n".join(_lines(root, spans, "", seen=set()))


def _lines(
    span: ReadableSpan, spans: Sequence[ReadableSpan], indent: str, seen: set[int]
) -> list[str]:
    assert span.context is not None
    seen.add(span.context.span_id)
    me = span.context.span_id
    children = [s for s in spans if s.parent is not None and s.parent.span_id == me]
    links = [
        s for s in spans if me in [link.context.span_id for link in s.links] and s not in children
    ]
    lines = [f"{indent}{_label(span)}"]
    for child, mark in [*((c, "") for c in children), *((s, "⇢ ") for s in links)]:
        assert child.context is not None
        if child.context.span_id in seen:
            continue
        below = _lines(child, spans, indent + "    ", seen)
        below[0] = f"{indent}└── {mark}{below[0][len(indent) + 4 :]}"
        lines += below
    return lines


def _label(span: ReadableSpan) -> str:
    attributes = span.attributes or {}
    detail = [f"{key.rsplit('.', 1)[-1]}={attributes[key]!s}" for key in (
        "messaging.operation.name", "sluice.settle.outcome", "messaging.batch.message_count"
    ) if key in attributes and attributes[key] not in ("send", "receive", "process")]  # fmt: skip
    return span.name + (f" ({', '.join(detail)})" if detail else "")


def test_the_docs_show_the_procurement_trace() -> None:
    tree = procurement_tree()
    assert tree.count("\n") >= 3  # the request, its rules' work and their consumers
    assert f"```text\n{tree}\n```" in DOC.read_text(), (
        "regenerate: python -m tests.contrib.test_otel_procurement"
    )


if __name__ == "__main__":
    print(procurement_tree())
