"""Rule expressions compiled for Spark SQL: the relations ``queue('q')`` and ``slice()``,
``now()`` and the JSON and XML constructors, over the Spark dialect of ``spark.py``.

JSON is built as text, piece by piece, as the other dialects' ``json_object`` writes it:
strings through Spark's own JSON writer (``to_json``), numbers in the shortest decimal
form the expression language prints, values taken as they are through VARIANT. XML is
built by ``sql_rules``' concatenation; the nodes ``xpath_nodes`` selects are serialised
by the Python function SQLite uses too, registered with the session as a UDF
(``register_functions``), so both engines write the same text.

A first row by an order (``SELECT v FROM slice() ORDER BY k LIMIT 1``) is an aggregate
here, not ``ORDER BY ... LIMIT`` in a correlated subquery: Spark 4.3 decorrelates that
wrongly (a subquery with one matching row gave NULL), so the rows are collected and
sorted by a comparator that spells out the keys' directions, NULLs last, then the id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from sluice.expr.nodes import Path, Subquery, Type
from sluice.expr.spark import SparkCompiler
from sluice.expr.sql import Source
from sluice.expr.sql_rules import RulesSqlCompiler

__all__ = ["XPATH_NODES_UDF", "SparkRulesCompiler", "register_functions"]

XPATH_NODES_UDF = "sluice_xpath_nodes"


class SparkRulesCompiler(SparkCompiler, RulesSqlCompiler):
    """Spark SQL for rules: every column of a rules plan, over rows with the columns of a
    stored message (``sluice.spark.rules`` gives them) plus ``id`` and, in relations,
    ``queue`` (its name)."""

    def __init__(
        self,
        source: Source | None = None,
        *,
        prefix: str = "x",
        hoisted: list[tuple[str, str]] | None = None,
    ) -> None:
        """``hoisted``: where subqueries over the triggering message go, as (column,
        SQL), each computed once in a derived table of ``m`` (see ``subquery``)."""
        super().__init__(source, prefix=prefix)
        self.hoisted = hoisted
        self._depth = 0

    def subquery(self, node: Subquery) -> str:
        # A subquery read as a column of m, computed once below the rules' columns: they
        # use a value several times, and Spark plans each use of a subquery as a join
        # of its own (and refuses one inside a higher-order function).
        self._depth += 1
        try:
            sql = super().subquery(node)
        finally:
            self._depth -= 1
        if self.hoisted is None or self._depth or self._vars:
            return sql  # nested, or reading a lambda's variable: stays where it is
        name = f"_sq{len(self.hoisted)}"
        self.hoisted.append((name, sql))
        return f"{self.source.alias}.{name}"

    def _let(self, value: str, sql_type: str, body: Callable[[str], str]) -> str:
        # Spark refuses a subquery inside a higher-order function, and a one-element
        # aggregate is one: a value read from a relation is spelled out where it is used
        # (never constant, so no branch of it is folded; the subquery may run again).
        if "(SELECT " in value or "(EXISTS (" in value:
            return body(f"({value})")
        return super()._let(value, sql_type, body)

    def parameter(self, name: str, kind: Type) -> str:
        return f"CAST({self.placeholder(name)} AS DOUBLE)"

    def row_id(self, alias: str) -> str:
        return f"CAST({alias}.id AS DOUBLE)"

    # --- JSON as text ------------------------------------------------------------------
    def _json_string(self, sql: str) -> str:
        """Text as a JSON string (NULL: ``null``), escaped by Spark's JSON writer."""
        written = f"to_json(array({sql}))"  # ["..."]: the brackets go
        return self._let(written, "STRING", lambda w: f"substr({w}, 2, char_length({w}) - 2)")

    def json_build(self, kind: Literal["object", "array"], args: list[str]) -> str:
        items = [f"coalesce({a}, 'null')" for a in args]
        if kind == "array":
            return f"('[' || concat_ws(',', {_listed(items)}) || ']')"
        pairs = [
            f"{self._json_string(args[n])} || ':' || {items[n + 1]}" for n in range(0, len(args), 2)
        ]
        return f"('{{' || concat_ws(',', {_listed(pairs)}) || '}}')"

    def json_item(self, sql: str, kind: Type) -> str:
        if kind == "json":
            return sql
        if kind == "boolean":
            return f"(CASE WHEN {sql} THEN 'true' WHEN NOT {sql} THEN 'false' END)"
        if kind == "number":
            # JSON has no NaN or infinities: null, as the databases' JSON builders write.
            return self._let(
                sql,
                "STRING",
                lambda x: (
                    f"CASE WHEN isnan({x}) OR abs({x}) = CAST('Infinity' AS DOUBLE) THEN NULL "
                    f"ELSE {self.cast(x, 'number', 'text')} END"
                ),
            )
        return self._json_string(sql)

    def json_raw(self, path: Path) -> str:
        # VARIANT keeps a number written with a fraction as the shortest DECIMAL: 15.0 is
        # DECIMAL(2,0) and writes as 15 (an integer written 15 is BIGINT). The other
        # engines copy the value as written, 15.0, and the message made from it keeps
        # reading a float: the fraction goes back on. (Inside a copied object or array
        # such a number still loses it: see docs/spark.md.)
        return self._let(
            self._get(path, "variant"),
            "STRING",
            lambda v: (
                f"(CASE WHEN schema_of_variant({v}) LIKE 'DECIMAL(%,0)' "
                f"THEN to_json({v}) || '.0' ELSE to_json({v}) END)"
            ),
        )

    def json_text(self, path: Path) -> str:
        return self.json_raw(path)

    # --- relations ---------------------------------------------------------------------
    def rows_aggregate(self, op: str, value: str) -> str:
        if op == "count":
            return "CAST(count(*) AS DOUBLE)"
        return f"coalesce(sum({value}), 0D)" if op == "sum" else f"{op}({value})"

    def first(self, node: Subquery, value: str, rows: str, alias: str) -> str:
        fields = [f"'v', {value}"]
        keys: list[tuple[str, bool]] = []
        for key, descending in node.order:
            for sql, _ in self.sort_keys(key):
                name = f"k{len(keys)}"
                fields.append(f"'{name}', {sql}")
                keys.append((name, descending))
        fields.append(f"'i', {alias}.id")
        left, right = self._name("l"), self._name("r")
        order = (
            f"CASE WHEN {left}.i < {right}.i THEN -1 WHEN {left}.i > {right}.i THEN 1 ELSE 0 END"
        )
        for name, descending in reversed(keys):
            a, b = f"{left}.{name}", f"{right}.{name}"
            before, after = ("1", "-1") if descending else ("-1", "1")
            order = (
                f"CASE WHEN {a} IS NULL AND {b} IS NULL THEN {order} "
                f"WHEN {a} IS NULL THEN 1 WHEN {b} IS NULL THEN -1 "
                f"WHEN {a} < {b} THEN {before} WHEN {a} > {b} THEN {after} ELSE {order} END"
            )
        collected = f"collect_list(named_struct({', '.join(fields)}))"
        return (
            f"(SELECT try_element_at(array_sort({collected}, ({left}, {right}) -> {order}), 1).v "
            f"{rows})"
        )

    # --- XML ---------------------------------------------------------------------------
    def xml_nodes(self, path: str, alias: str) -> str:
        a = alias
        return f"{XPATH_NODES_UDF}({self.bind(path)}, {a}.body, {a}.content_type)"

    def char(self, code: int) -> str:
        return f"char({code})"


def _listed(parts: list[str]) -> str:
    """concat_ws's arguments: an empty text where there are none."""
    return ", ".join(parts) if parts else "''"


def register_functions(spark: Any) -> None:
    """Register the Python functions rule SQL calls (``xpath_nodes``) with ``spark``."""
    from pyspark.sql.types import StringType  # noqa: PLC0415  (pyspark is an extra)

    from sluice.expr.xml import select_nodes  # noqa: PLC0415  (lxml: only XML needs it)
    from sluice.message import is_xml  # noqa: PLC0415

    def nodes(path: str, body: str | None, content_type: str | None) -> str | None:
        if body is None or not is_xml(content_type or "application/json"):
            return None
        return select_nodes(path, body)

    spark.udf.register(XPATH_NODES_UDF, nodes, StringType())
