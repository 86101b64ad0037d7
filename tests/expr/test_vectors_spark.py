"""Every value vector of vectors.json on Spark SQL, as the Python evaluator defines it.

Spark takes seconds per query but little more for a wide one, so the vectors run
in a few batched selects over one DataFrame holding every vector's message: each
vector is a column, computed only on its own message's row (a CASE on the row
number), with all parameters bound at once. A batch Spark refuses is run again
one vector at a time, so a failure names its vector.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import pytest

from sluice.expr import Node, compile_python, parse
from sluice.expr.failing import reason_in
from sluice.expr.spark import SparkCompiler
from sluice.expr.spark_rules import SparkRulesCompiler

from .test_rule_vectors import body_of, checked
from .vectors import (
    MESSAGE_DEFAULTS,
    VECTORS_FILE,
    RuleVector,
    Vector,
    load_rule_vectors,
    load_vectors,
    normalise,
    python_row,
    same_json,
    same_value,
    stored,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_ORDER: Final = {
    "id": 7,
    "date": "2026-11-22",
    "lines": [
        {"amount": 2, "price": 9.5, "item": [{"id": "a", "ean": 1}, {"id": "b", "ean": 2}]},
        {"amount": 1, "price": 120, "item": [{"id": "c", "ean": 3}]},
        {"amount": 4, "price": "2.25", "item": "none"},
    ],
}


def _own(ident: str, expr: str, message: Mapping[str, Any], expected: Any) -> Vector:
    return Vector(f"spark-{ident}", expr, {**MESSAGE_DEFAULTS, **message}, expected=expected)


# Cases for what the Spark SQL does differently from the other engines: keys its
# path syntax cannot spell, ANSI mode's errors, Java's number printing, lets.
OWN: Final = [
    _own("key-leading-space", 'body." a" = 1', {"body": {" a": 1, "a": 2}}, True),
    _own("key-dot-and-question", 'body."a.b?" = 1', {"body": {"a.b?": 1}}, True),
    _own("key-dot-and-apostrophe", 'body."it\'s.x" = 1', {"body": {"it's.x": 1}}, True),
    _own("key-after-fallback", 'body." a".b[1] = 3', {"body": {" a": {"b": [2, 3]}}}, True),
    _own("key-in-lambda", 'sum(body.xs, x -> x." v")', {"body": {"xs": [{" v": 1}, {" v": 2}]}}, 3),
    _own("div-zero-in-lambda", "sum(body.xs, x -> 1 / x)", {"body": {"xs": [0, 2, 4]}}, 0.75),
    _own("avg-skips-text", "avg(body.xs, x -> x)", {"body": {"xs": [1, "2", 3, None]}}, 2),
    _own("sum-empty", "sum(body.xs)", {"body": {"xs": []}}, 0),
    _own("min-of-none", "min(body.xs)", {"body": {"xs": ["a"]}}, None),
    _own("count-object", "count(body.o)", {"body": {"o": {"a": 1}}}, None),
    _own("exists-unknown", "exists(body.xs, x -> x > 1)", {"body": {"xs": [None, "a"]}}, False),
    _own(
        "nested-lambdas",
        "sum(body.lines, l -> sum(l.item, i -> i.ean * l.amount))",
        {"body": _ORDER},
        9,
    ),
    _own("text-small", "CAST(0.00001 AS TEXT)", {}, "0.00001"),
    _own("text-ten-thousandth", "CAST(0.0001 AS TEXT)", {}, "0.0001"),
    _own("text-million-and-half", "CAST(12345678.5 AS TEXT)", {}, "12345678.5"),
    _own("text-huge-whole", "CAST(1e22 AS TEXT)", {}, "10000000000000000000000"),
    _own("text-big-fraction", "CAST(1e15 + 0.5 AS TEXT)", {}, "1000000000000000.5"),
    _own("text-tiny", "CAST(body.x AS TEXT)", {"body": {"x": 1.5e-7}}, "0.00000015"),
    _own("text-negative", "CAST(-2.5 AS TEXT)", {}, "-2.5"),
    _own("text-negative-zero", "CAST(-0.0 AS TEXT)", {}, "0"),
    _own("int-of-huge", "CAST(1e300 AS INT) > 0", {}, True),
    _own("floor-huge", "floor(body.x) = body.x", {"body": {"x": 1e300}}, True),
    _own("round-half-up", "round(1.005, 2)", {}, 1.01),
    _own("round-negative", "round(-2.5)", {}, -3),
    _own("round-left", "round(1250, -2)", {}, 1300),
    _own("round-row-scale", "round(body.x, body.d)", {"body": {"x": 1.005, "d": 2}}, 1.01),
    _own("round-row-scale-left", "round(body.x, body.d)", {"body": {"x": -149.5, "d": -1}}, -150),
    _own("round-row-far-left", "round(body.x, body.d)", {"body": {"x": 12.5, "d": -400}}, 0),
    _own("substr-huge", "substr('hello', 2, 1e12)", {}, "ello"),
    _own("substr-start-huge", "substr('hello', 1e12)", {}, ""),
    _own("epoch-fraction", "epoch('2024-02-29T12:30:15.25Z')", {}, 1709209815.25),
    _own("epoch-invalid-day", "epoch('2023-02-29')", {}, None),
    _own("epoch-hour-24", "epoch('2024-01-01T24:00:00')", {}, None),
    _own("epoch-year-zero", "year('0000-01-01')", {}, None),
    _own("epoch-trailing-newline", "epoch(body.d)", {"body": {"d": "2024-01-01\n"}}, None),
    _own(
        "date-from-lambda",
        "count(body.ds, d -> month(d) = 2)",
        {"body": {"ds": ["2024-02-01", "x", "2024-03-01"]}},
        1,
    ),
    _own("number-overflow", "CAST('1e400' AS DOUBLE)", {}, None),
    _own("number-suffix", "CAST('1d' AS DOUBLE)", {}, None),
    _own("like-backslash", "body.s LIKE 'a\\%'", {"body": {"s": "a\\bc"}}, True),
    _own("like-newline", "body.s LIKE 'a_b'", {"body": {"s": "a\nb"}}, True),
    _own("lower-full", "lower('ΣΑΣ İ')", {}, "σας i̇"),
    _own("upper-sharp-s", "upper('straße')", {}, "STRASSE"),
    _own("quote-literal", "'it''s \\ \"é\" 😀' = body.s", {"body": {"s": 'it\'s \\ "é" 😀'}}, True),
    _own(
        "xml-type-with-charset",
        "xpath_number(body, '/a') + 1",
        {"body": "<a>1</a>", "content_type": "text/xml; charset=utf-8"},
        2,
    ),
]

VECTORS: Final = load_vectors() if VECTORS_FILE.exists() else []
VALUES: Final = [v for v in VECTORS if v.error is None] + OWN
RULE_VECTORS: Final = load_rule_vectors() if VECTORS_FILE.exists() else []

_SCHEMA: Final = (
    "n int, body string, properties string, content_type string, priority bigint, "
    "enqueued_at double, available_at double, expires_at double, attempts int, type string, "
    "correlation_id string, reply_to string"
)
_BATCH: Final = 60
_VIEW: Final = "sluice_vector_messages"
_RULES_VIEW: Final = "sluice_rule_vector_messages"


@dataclass(frozen=True, slots=True)
class _Failed:
    """Spark refused the vector's SQL: the test shows why."""

    error: str


def _checked(vector: Vector) -> Node:
    node = parse(vector.expr, want=vector.want)
    assert node.type in ("boolean", "number", "text"), f"{vector.expr!r} is {node.type}"
    return node


def _run(
    spark: SparkSession, batch: list[tuple[int, str]], params: dict[str, Any], view: str = _VIEW
) -> list[Any]:
    """The answers of ``(row number, SQL)`` pairs, each on its own row, in one query."""
    columns = ", ".join(f"CASE WHEN m.n = {n:d} THEN {sql} END AS c{n:d}" for n, sql in batch)
    rows = ", ".join(str(n) for n, _ in batch)
    query = f"SELECT m.n, {columns} FROM {view} AS m WHERE m.n IN ({rows})"
    found = {row["n"]: row[f"c{row['n']}"] for row in spark.sql(query, args=params).collect()}
    return [found[n] for n, _ in batch]


@pytest.fixture(scope="module")
def answers(spark: SparkSession) -> dict[str, Any]:
    """Every vector's answer on Spark, by vector id, from a few batched queries."""
    started = time.perf_counter()
    # Whole-stage code for 60 wide columns outgrows Java's 64 KB methods: Spark would
    # try, log the failure and fall back to the per-expression code it uses anyway.
    whole_stage = spark.conf.get("spark.sql.codegen.wholeStage") or "true"
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    try:
        results = _answers(spark)
    finally:
        spark.conf.set("spark.sql.codegen.wholeStage", whole_stage)
    print(f"{len(VALUES)} vectors on Spark in {time.perf_counter() - started:.1f} s")
    return results


def _answers(spark: SparkSession) -> dict[str, Any]:
    rows = [(n, *stored(v.message).columns().values()) for n, v in enumerate(VALUES)]
    spark.createDataFrame(rows, _SCHEMA).createOrReplaceTempView(_VIEW)
    compiled: list[tuple[int, str, dict[str, Any]]] = []
    results: dict[str, Any] = {}
    for n, vector in enumerate(VALUES):
        compiler = SparkCompiler(prefix=f"v{n}_")
        try:
            compiled.append((n, compiler.compile(_checked(vector)), compiler.params))
        except Exception as exc:  # reported by the vector's test
            results[vector.id] = _Failed(f"does not compile: {exc!r}")
    for start in range(0, len(compiled), _BATCH):
        chunk = compiled[start : start + _BATCH]
        params = {k: v for _, _, p in chunk for k, v in p.items()}
        try:
            values = _run(spark, [(n, sql) for n, sql, _ in chunk], params)
        except Exception:  # one vector spoils the batch: find out which, one by one
            values = []
            for n, sql, p in chunk:
                try:
                    values.extend(_run(spark, [(n, sql)], p))
                except Exception as exc:  # reported by the vector's test
                    values.append(_Failed(str(exc).strip().splitlines()[0]))
        results.update(
            (VALUES[n].id, value) for (n, _, _), value in zip(chunk, values, strict=True)
        )
    return results


def test_own_vectors_agree_with_python() -> None:
    """The Spark-specific cases hold for the reference evaluator too."""
    wrong = []
    for vector in OWN:
        node = _checked(vector)
        value = normalise(compile_python(node)(python_row(vector.message)), node.type)
        if not same_value(value, vector.expected):
            wrong.append(f"{vector.id}: {value!r}")
    assert not wrong


@pytest.mark.usefixtures("spark")  # through answers: one session for every Spark test
@pytest.mark.parametrize("vector", VALUES, ids=lambda v: v.id)
def test_spark(vector: Vector, answers: dict[str, Any]) -> None:
    answer = answers[vector.id]
    assert not isinstance(answer, _Failed), f"{vector.id}: {vector.expr!r}: {answer.error}"
    actual = normalise(answer, _checked(vector).type)
    assert same_value(actual, vector.expected), (
        f"{vector.id}: {vector.expr!r} gave {answer!r}, expected {vector.expected!r}"
    )


# --- rule vectors: new bodies and run-time errors (test_rule_vectors.py's, on Spark) ------
@pytest.fixture(scope="module")
def rule_answers(spark: SparkSession) -> dict[str, Any]:
    """Every rule vector's body on Spark, the bodies in one query; a vector that must raise
    alone (it fails its query), as ``_Failed`` with Spark's message."""
    rows = [(n, *stored(v.message).columns().values()) for n, v in enumerate(RULE_VECTORS)]
    spark.createDataFrame(rows, _SCHEMA).createOrReplaceTempView(_RULES_VIEW)
    bodies: list[tuple[int, str]] = []
    params: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for n, vector in enumerate(RULE_VECTORS):
        compiler = SparkRulesCompiler(prefix=f"r{n}_")
        sql = compiler.compile(checked(vector))
        if vector.raises is None:
            bodies.append((n, sql))
            params.update(compiler.params)
            continue
        try:
            results[vector.id] = _run(spark, [(n, sql)], compiler.params, _RULES_VIEW)[0]
        except Exception as exc:  # the run-time error: its test reads the message
            results[vector.id] = _Failed(str(exc))
    values = _run(spark, bodies, params, _RULES_VIEW)
    for (n, _), value in zip(bodies, values, strict=True):
        results[RULE_VECTORS[n].id] = value
    return results


@pytest.mark.usefixtures("spark")
@pytest.mark.parametrize("vector", [v for v in RULE_VECTORS if not v.raises], ids=lambda v: v.id)
def test_spark_rule_body(vector: RuleVector, rule_answers: dict[str, Any]) -> None:
    assert vector.body is not None
    answer = rule_answers[vector.id]
    assert same_json(body_of(checked(vector), answer), json.loads(vector.body)), (
        f"{vector.id}: {vector.rule!r} made {answer!r}"
    )


@pytest.mark.usefixtures("spark")
@pytest.mark.parametrize("vector", [v for v in RULE_VECTORS if v.raises], ids=lambda v: v.id)
def test_spark_rule_raises(vector: RuleVector, rule_answers: dict[str, Any]) -> None:
    answer = rule_answers[vector.id]
    assert isinstance(answer, _Failed), f"{vector.id}: {vector.rule!r} made {answer!r}"
    assert reason_in(answer.error) == vector.raises, answer.error
