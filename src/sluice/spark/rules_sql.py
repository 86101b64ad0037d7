"""The rules' compilers for Spark (``plan.RuleCompilers``) and the views their SQL reads:
the micro-batch's messages, ``queue('q')``'s snapshots and the slices' members, which
sluice.spark.rules sets up for each evaluation."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import pyarrow as pa

from sluice.expr.spark_rules import SparkRulesCompiler
from sluice.expr.sql import RelationSource, Source
from sluice.rules.plan import QueuePlan
from sluice.spark.rules_source import KEPT_ARROW, KEPT_SCHEMA, MESSAGE_SCHEMA

__all__ = [
    "BATCH_VIEW",
    "ROWS_SCHEMA",
    "SLICE_ARROW",
    "SLICE_SCHEMA",
    "SLICE_VIEW",
    "SparkRelations",
    "SparkRuleSQL",
    "queue_view",
]

SLICE_VIEW: Final = "sluice_rules_slice"
BATCH_VIEW: Final = "sluice_rules_m"
ROWS_SCHEMA: Final = f"id BIGINT, {MESSAGE_SCHEMA}"
SLICE_SCHEMA: Final = f"slicing STRING, key STRING, {KEPT_SCHEMA}"
SLICE_ARROW: Final = pa.schema(
    [("slicing", pa.string()), ("key", pa.string()), *((f.name, f.type) for f in KEPT_ARROW)]
)


def queue_view(queue_id: int) -> str:
    """The view ``queue('q')`` reads on Spark: q's kept messages, taken per batch."""
    return f"sluice_rules_q{queue_id:d}"


class SparkRelations(RelationSource):
    """``queue('q')`` and ``slice()`` as the views a batch sets up."""

    def __init__(self, queue_ids: Mapping[str, int], slicing: str | None) -> None:
        self._queue_ids = queue_ids
        self._slicing = slicing

    def relation(
        self,
        kind: Literal["queue", "slice"],
        queue: str | None,
        alias: str,
        key: str | None,
        bind: Callable[[Any], str],
    ) -> tuple[str, str]:
        if kind == "queue":
            assert queue is not None  # the checker names a declared queue
            return f"{queue_view(self._queue_ids.get(queue, 0))} AS {alias}", "true"
        assert self._slicing is not None
        assert key is not None
        return (
            f"{SLICE_VIEW} AS {alias}",
            f"{alias}.slicing = {bind(self._slicing)} AND {alias}.key = {key}",
        )

    def queue_name(self, alias: str) -> str:
        return f"{alias}.queue"


class SparkRuleSQL:
    """The rules' compilers for Spark (``plan.RuleCompilers``); ``hoisted`` collects the
    subqueries over the triggering message of every plan it compiles."""

    def __init__(self) -> None:
        self.hoisted: list[tuple[str, str]] = []

    def rules_compiler(
        self, relations: RelationSource | None, prefix: str = "r", alias: str = "m"
    ) -> SparkRulesCompiler:
        source = Source(alias=alias, relations=relations)
        return SparkRulesCompiler(source, prefix=prefix, hoisted=self.hoisted)

    def evaluation(self, plan: QueuePlan, omit: frozenset[int] = frozenset()) -> str:
        """The SELECT of ``plan``'s columns over the view of the batch's messages: the
        message's own parts, then the columns; the subqueries they read below them.
        ``omit``: columns left NULL, and with them the message's parts (the runner's
        Evaluate for the SQL enqueue: what the database builds itself is not computed)."""
        columns = plan.columns_sql(omit)
        used = [(n, sql) for n, sql in self.hoisted if re.search(rf"\bm\.{n}\b", columns)]
        inner = "".join(f", {sql} AS {n}" for n, sql in used)
        parts = (
            "NULL, NULL, NULL, NULL"
            if omit
            else "m.properties, m.content_type, m.body, m.body_bytes"
        )
        return f"SELECT m.id, {parts}{columns} FROM (SELECT m.*{inner} FROM {BATCH_VIEW} AS m) AS m"

    def rules_relations(self, queue_ids: Mapping[str, int], slicing: str | None) -> RelationSource:
        return SparkRelations(queue_ids, slicing)
