"""Issue 40's rules semantics on Spark: a run-time failure (a division by zero, a CAST
that does not convert) is the message's error message, as on the local engine, without
failing the micro-batch, and numbers come out as the local engine writes them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import sluice
from sluice.spark.rules import run_rules
from tests.contract.test_rules_runtime import EXPECTED, MESSAGES, RUNTIME, outcome

pytestmark = pytest.mark.usefixtures("spark")


def test_run_time_errors_and_numbers_on_spark_are_the_local_engines(
    spark: SparkSession,
    two: tuple[sluice.Database, sluice.Database],
    shared_url: str,
    tmp_path: Path,
) -> None:
    local, remote = two
    for db in two:
        db.apply(RUNTIME)
        db.queue("inbox").put_many(MESSAGES)
    expected = local.rules.run_until_idle()
    got = run_rules(spark, shared_url, checkpoint=str(tmp_path / "ck"))
    assert (got.processed, got.errors) == (expected.processed, expected.errors) == (5, 2)
    made, errors = outcome(remote)
    assert (sorted(made), errors) == (sorted(EXPECTED[0]), EXPECTED[1])
    assert outcome(remote) == outcome(local)
    assert remote.queue("inbox").browse() == []
