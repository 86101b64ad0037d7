"""The Spark SQL compiler on a local Spark: strict JSON typing, array functions with
nested lambdas, ANSI mode, XPath, parameters and literals, ordering."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import pytest

from sluice.expr import Scope, Source, parse, parse_order
from sluice.expr.spark import SparkCompiler, spark_literal

from .vectors import MESSAGE_DEFAULTS, stored

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_SCHEMA: Final = (
    "body string, properties string, content_type string, priority bigint, "
    "enqueued_at double, available_at double, expires_at double, attempts int, type string, "
    "correlation_id string, reply_to string, t1 string, n1 double, n2 double"
)
_views = itertools.count(1)

ORDER: Final = {
    "customer": {"name": "Smith"},
    "lines": [
        {"amount": 2, "price": 9.5, "item": [{"id": "a", "ean": 10}, {"id": "b", "ean": 20}]},
        {"amount": 1, "price": 120, "item": [{"id": "c", "ean": 30}]},
        {"amount": "3", "price": 2.25, "item": []},
    ],
    "zero": 0,
    "s": "12",
    "n": 12,
}
XML: Final = "<order id='42'><customer>Smith</customer><line><price>9.5</price></line></order>"


def _view(spark: SparkSession, messages: Sequence[Mapping[str, Any]]) -> str:
    """A temporary view of stored messages (declared properties in t1, n1, n2)."""
    rows = []
    for message in messages:
        full = {**MESSAGE_DEFAULTS, **{k: v for k, v in message.items() if k in MESSAGE_DEFAULTS}}
        declared = (message.get("t1"), message.get("n1"), message.get("n2"))
        rows.append((*stored(full).columns().values(), *declared))
    name = f"sluice_spark_compile_{next(_views)}"
    frame: DataFrame = spark.createDataFrame(rows, _SCHEMA)
    frame.createOrReplaceTempView(name)
    return name


def _evaluate(
    spark: SparkSession,
    expressions: Sequence[str],
    message: Mapping[str, Any],
    *,
    compiler: SparkCompiler | None = None,
    scope: Scope | None = None,
) -> list[Any]:
    """Each expression's value for one message, in one query."""
    compiler = compiler or SparkCompiler()
    columns = ", ".join(
        f"{compiler.compile(parse(text, scope))} AS c{i}" for i, text in enumerate(expressions)
    )
    view = _view(spark, [message])
    (row,) = spark.sql(f"SELECT {columns} FROM {view} AS m", args=compiler.params).collect()
    return list(row)


@contextmanager
def _conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    before = spark.conf.get(key)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


# --- without Spark ---------------------------------------------------------------------
def test_values_are_parameters_not_sql() -> None:
    compiler = SparkCompiler()
    sql = compiler.compile(parse("body.name = 'O''Brien' AND body.n > 2.5 AND body.t = true"))
    assert "Brien" not in sql
    assert "2.5" not in sql
    assert list(compiler.params.values()).count("O'Brien") == 1
    assert ":x" in sql


@pytest.mark.parametrize(
    ("value", "sql"),
    [
        (None, "NULL"),
        (True, "TRUE"),
        (-7, "CAST('-7' AS BIGINT)"),
        (2.5e-7, "CAST('2.5e-07' AS DOUBLE)"),
        ("", "''"),
        ("a'b", "CAST(X'612762' AS STRING)"),
    ],
)
def test_spark_literal(value: Any, sql: str) -> None:
    assert spark_literal(value) == sql


# --- on Spark --------------------------------------------------------------------------
def test_strict_json_typing(spark: SparkSession) -> None:
    values = _evaluate(
        spark,
        [
            "body.s > 10",  # the text "12" is no number
            "body.n > 10",
            "body.n = '12'",  # nor the number 12 text
            "CAST(body.s AS DOUBLE) + 1",
            "CAST(body.n AS TEXT)",
            "body.customer > 1",  # an object is neither
            "body.customer.name = 'Smith'",
            "body.missing IS NULL",
            "body.lines[2].amount * 2",  # "3"
            "CAST(body.lines[2].amount AS INT) * 2",
        ],
        {"body": ORDER},
    )
    assert values == [None, True, None, 13.0, "12", None, True, True, None, 6.0]


def test_array_functions_with_nested_lambdas(spark: SparkSession) -> None:
    values = _evaluate(
        spark,
        [
            "count(body.lines)",
            "sum(body.lines, l -> l.amount * l.price)",  # the text "3" counts as nothing
            "sum(body.lines, l -> sum(l.item, i -> i.ean * l.amount))",
            "max(body.lines, l -> count(l.item))",
            "avg(filter(body.lines, l -> count(l.item) > 0), l -> l.price)",
            "exists(body.lines, l -> exists(l.item, i -> i.id = 'c' AND l.price > 100))",
            "count(body.lines, l -> exists(l.item, i -> i.ean >= 20))",
            "sum(body.customer)",  # not an array
            "sum(body.lines[2].item)",  # an empty one
        ],
        {"body": ORDER},
    )
    assert values == [3.0, 139.0, 90.0, 2.0, 64.75, True, 2.0, None, 0.0]


def test_nothing_raises_under_ansi_mode(spark: SparkSession) -> None:
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    values = _evaluate(
        spark,
        [
            "1 / body.zero",
            "sum(body.lines, l -> l.price / (l.amount - 1))",  # 9.5/1 + x/0 + nothing
            "CAST('12x' AS INT)",
            "CAST('1e400' AS DOUBLE)",
            "CAST(1e300 AS INT) > 0",
            "floor(1e300) = 1e300",
            "round(1e300, 2) = 1e300",
            "substr('hello', 1e12)",
            "substr('hello', 2, 1e12)",
            "epoch('2023-02-29')",
            "month('2024-13-01')",
            "epoch('2024-01-01T23:59:60')",
            "CAST(body.customer.name AS DOUBLE)",
        ],
        {"body": ORDER},
    )
    assert values == [None, 9.5, None, None, True, True, True, "", "ello", None, None, None, None]


def test_dates_do_not_depend_on_the_session_time_zone(spark: SparkSession) -> None:
    expressions = ["epoch('2024-02-29T23:30:00.5Z')", "day('2024-02-29T23:30:00')"]
    expected = [1709249400.5, 29.0]
    assert _evaluate(spark, expressions, {}) == expected
    with _conf(spark, "spark.sql.session.timeZone", "Pacific/Kiritimati"):
        assert _evaluate(spark, expressions, {}) == expected


def test_xpath(spark: SparkSession) -> None:
    expressions = [
        "xpath(body, '/order/customer')",
        "xpath_number(body, 'sum(/order/line/price)') * 2",
        "xpath_number(body, '/order/customer')",  # NaN
        "xpath_number(body, '1 div 0')",
        "xpath_boolean(body, '/order/line[price > 9]')",
        "xpath(body, '/order/nothing')",
    ]
    xml = _evaluate(spark, expressions, {"body": XML, "content_type": "application/xml"})
    assert xml == ["Smith", 19.0, None, None, True, ""]
    # Spark's xpath raises on text that is not XML: only XML bodies are read.
    for message in ({"body": ORDER}, {"body": "<a>1</a>", "content_type": "text/plain"}):
        assert _evaluate(spark, expressions, message) == [None] * len(expressions)


@pytest.mark.parametrize("inline", [False, True], ids=["parameters", "inline"])
def test_literals_of_every_type(spark: SparkSession, inline: bool) -> None:
    text = 'it\'s "quoted" \\ back\\slash, ünï 日本 😀 \n'
    sql_text = "'" + text.replace("'", "''") + "'"
    compiler = SparkCompiler(inline=inline)
    values = _evaluate(
        spark,
        [
            f"body.s = {sql_text}",
            sql_text,
            "length(" + sql_text + ")",
            "body.big = 9007199254740993",
            "4006381333931 + 0.5",
            "-7",
            "true",
            "body.t = false",
            "NULL IS NULL",
            "CAST(NULL AS TEXT) IS NULL",
            "body.s LIKE 'it''s %'",
            "round(2.675, 2)",
        ],
        {"body": {"s": text, "big": 9007199254740993, "t": False}},
        compiler=compiler,
    )
    expected = [True, text, len(text), True, 4006381333931.5, -7, True, True, True, True, True]
    assert values == [*expected, 2.68]
    assert bool(compiler.params) != inline


def test_keys_the_path_syntax_cannot_spell(spark: SparkSession) -> None:
    keys = [" lead", "a.b?", "it's.x", "x[0]", 'a"b', "tab\t", "$", "?", "a'b\"c"]
    body = {key: n for n, key in enumerate(keys)}
    quoted = ['"' + key.replace('"', '""') + '"' for key in keys]
    values = _evaluate(spark, [f"body.{q} = {n}" for n, q in enumerate(quoted)], {"body": body})
    assert values == [True] * len(keys)


def test_declared_properties_and_columns(spark: SparkSession) -> None:
    scope = Scope({"region": "text", "weight": "number", "vip": "boolean"})
    source = Source(alias="m", properties={"region": "t1", "weight": "n1", "vip": "n2"})
    values = _evaluate(
        spark,
        [
            "region = 'eu' AND weight > 2 AND vip",
            "priority * 2 + attempts",
            "content_type",
            "now() > 1700000000",
        ],
        {"t1": "eu", "n1": 2.5, "n2": 1.0, "priority": 2**40, "attempts": 3},
        compiler=SparkCompiler(source),
        scope=scope,
    )
    assert values == [True, 2.0**41 + 3, "application/json", True]


def test_order_by_puts_nulls_last(spark: SparkSession) -> None:
    messages = [
        {"body": {"k": "b"}, "correlation_id": "1"},
        {"body": {"k": 2}, "correlation_id": "2"},
        {"body": {}, "correlation_id": "3"},
        {"body": {"k": "a"}, "correlation_id": "4"},
        {"body": {"k": 10}, "correlation_id": "5"},
        {"body": {"k": "é"}, "correlation_id": "6"},
    ]
    view = _view(spark, messages)
    compiler = SparkCompiler()
    node, descending = parse_order("body.k")
    keys = ", ".join(compiler.order_key(node, descending))
    query = f"SELECT m.correlation_id FROM {view} AS m ORDER BY {keys}"
    ordered = [row[0] for row in spark.sql(query, args=compiler.params).collect()]
    assert ordered == ["2", "5", "4", "1", "6", "3"]  # numbers, then text by code point


def test_dataframe_filter_with_inline_values(spark: SparkSession) -> None:
    view = _view(spark, [{"body": {"s": "it's"}}, {"body": {"s": "its"}}])
    compiler = SparkCompiler(inline=True)
    condition = compiler.compile(parse("body.s = 'it''s' AND count(body.s) IS NULL"))
    assert not compiler.params
    rows = spark.table(view).alias("m").filter(condition).collect()
    assert [row["body"] for row in rows] == ['{"s":"it\'s"}']
