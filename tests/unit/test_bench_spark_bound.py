"""bench spark's CPU bound: whether the cores leave a stream room to meet its target."""

from __future__ import annotations

from bench.spark.report import (
    POSITION_FLOOR_LABEL,
    SPARK_STREAM_FLOOR_LABEL,
    Cell,
    Run,
    _cpu_bound,
)


def _cell(label: str, seconds: float, cpu: float | None) -> Cell:
    return Cell("read", label, "postgresql", 1000, runs=[Run(seconds, cpu=cpu)])


def _reads(spark_cpu: float, read_cpu: float) -> tuple[list[Cell], Cell]:
    jdbc = _cell("Spark JDBC source", 1.0, 1.5)
    spark = _cell(SPARK_STREAM_FLOOR_LABEL, 1.5, spark_cpu)
    read = _cell(POSITION_FLOOR_LABEL, 1.2, read_cpu)
    return [jdbc, spark, read], jdbc


def test_a_stream_that_needs_more_cpu_than_the_cores_have_is_bound() -> None:
    # 0.5 x JDBC leaves 2.0 s, 4.0 CPU seconds of 2 cores; Spark and the read need 5.0.
    reads, jdbc = _reads(3.0, 2.0)
    text = "\n".join(_cpu_bound(reads, jdbc, cores=2))
    assert "4.00 CPU seconds of the 2 cores" in text
    assert "together 5.00, 1.25 of the budget" in text
    # What is left for the read once Spark has its share: 1.0 of the 2.0 it costs.
    assert "at most 1.00 CPU seconds, 50% of what it costs" in text


def test_a_stream_within_the_budget_is_not_called_bound() -> None:
    reads, jdbc = _reads(2.0, 1.5)
    text = "\n".join(_cpu_bound(reads, jdbc, cores=2))
    assert "together 3.50, 0.88 of the budget" in text
    assert "within the cores' budget" in text
    assert "No overlap" not in text


def test_no_bound_is_claimed_without_every_figure() -> None:
    reads, jdbc = _reads(2.0, 1.5)
    reads[2].runs = [Run(1.2)]  # the read's CPU was not measured
    assert _cpu_bound(reads, jdbc, cores=2) == []
    assert _cpu_bound(reads[:2], jdbc, cores=2) == []
