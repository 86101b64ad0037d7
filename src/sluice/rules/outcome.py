"""What a rules batch tells its callers: its result, the hook that evaluates elsewhere,
and the signal that the rules changed under it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.backends.base import RuleUnit
from sluice.errors import SluiceError
from sluice.rules.plan import QueuePlan

__all__ = ["FIXED_COLUMNS", "BatchResult", "Evaluate", "StalePlan"]

FIXED_COLUMNS = 5
"""id, properties, content_type, body, body bytes: then the plan's columns."""


@dataclass(slots=True)
class BatchResult:
    processed: int = 0
    errors: int = 0
    produced: dict[str, int] = field(default_factory=dict)
    deferred: int = 0
    """Echo messages found not yet due: they wait until they are."""
    removed: int = 0
    """Processed messages removed as they were (their queue keeps none: see the plan)."""


Evaluate = Callable[[RuleUnit, QueuePlan, list[int], frozenset[int]], list[Sequence[Any]]]
"""The rules' columns of the messages ``ids`` of a plan's queue, evaluated elsewhere than
in the database (on Spark: sluice.spark.rules), in rules_evaluate's layout: id,
properties, content type, body text, body bytes, then the plan's columns. Called inside
the batch's unit, which it may read (a wave's slices as the waves before it left them).
The last argument: columns not needed, NULL in their places; if it is not empty, the
message's own parts may be NULL too (rules_evaluate_lean's layout, for the SQL enqueue)."""


class StalePlan(SluiceError):
    """Another version of the rules was applied: compile it, then process."""
