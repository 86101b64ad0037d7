"""The extras a rules application needs where it is applied or run, checked there (at
``apply``, and when an engine loads it) rather than at its first message."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.engine.types import TypeRegistry
from sluice.extras import require
from sluice.rules.model import Application
from sluice.rules.plan import PlannedEnqueue, QueuePlan

__all__ = ["require_extras"]


def require_extras(app: Application, plans: Sequence[QueuePlan], types: TypeRegistry) -> None:
    """MissingDependency naming the extra and the line that needs it, unless this process
    has every extra ``app`` (compiled into ``plans``) needs: lxml for the XML bodies its
    rules build (made canonical as they are enqueued) and for queues of XML types (whose
    messages the engine checks as it enqueues them)."""
    for plan in plans:
        for planned in plan.rules:
            for branch in planned.branches:
                for action in branch.actions:
                    if isinstance(action, PlannedEnqueue) and action.kind == "xml":
                        rule = planned.rule.name
                        require("xml", f"line {action.line}: rule {rule!r} (an XML body)")
    for queue in app.queues.values():
        for name in queue.types:
            found = types.get(name)
            if found is not None and found.kind == "xml":
                require("xml", f"line {queue.line}: queue {queue.name!r} (XML type {name!r})")
