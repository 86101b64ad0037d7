"""bench spark's bounds: whether the cores leave a stream room to meet its target, and
where Spark alone's stream (a Python source that fetches nothing) stands against it."""

from __future__ import annotations

from bench.spark.report import (
    POSITION_FLOOR_LABEL,
    SPARK_STREAM_FLOOR_LABEL,
    Cell,
    Run,
    _cpu_bound,
    _floor_bound,
)


def _cell(
    label: str, seconds: float, cpu: float | None = None, batch: int | None = None, p: int = 2
) -> Cell:
    return Cell("read", label, "postgresql", 1000, batch, p, runs=[Run(seconds, cpu=cpu)])


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


STREAM = "sluice streaming read of a subscription (by position)"


def test_a_spark_floor_below_the_target_puts_it_out_of_reach() -> None:
    # JDBC 1,000 msgs/s; Spark alone's stream 1,000 / 2.5 = 400: 0.40 x, under 0.5.
    jdbc = _cell("Spark JDBC source", 1.0)
    floor = _cell(SPARK_STREAM_FLOOR_LABEL, 2.5, batch=250)
    stream = _cell(STREAM, 5.0, batch=250)
    other = _cell(STREAM, 4.0, batch=500)  # no floor at its batch: not compared
    text = "\n".join(_floor_bound([jdbc, floor, stream, other], jdbc))
    assert "max_per_batch 250: Spark alone 400 msgs/s = 0.40 x JDBC, below the target" in text
    assert f"{STREAM}, partitions 2: 0.50 of Spark alone" in text
    assert "max_per_batch 500" not in text
    assert "out of reach for this design of source" in text


def test_a_spark_floor_above_the_target_is_said_so() -> None:
    jdbc = _cell("Spark JDBC source", 1.0)
    floor = _cell(SPARK_STREAM_FLOOR_LABEL, 1.6, batch=250)
    text = "\n".join(_floor_bound([jdbc, floor], jdbc))
    assert "= 0.62 x JDBC, above the target of 0.5" in text


def test_no_floor_is_claimed_without_a_jdbc_figure() -> None:
    floor = _cell(SPARK_STREAM_FLOOR_LABEL, 1.6, batch=250)
    jdbc = _cell("Spark JDBC source", 1.0)
    jdbc.errors.append("fill failed")
    assert _floor_bound([jdbc, floor], jdbc) == []
    assert _floor_bound([floor], None) == []
