"""Rules on Spark (sluice.spark.rules): the local engine's results, set at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import sluice
from sluice.demo_procurement import run_procurement_demo
from sluice.errors import ConfigurationError
from sluice.spark.rules import run_rules

pytestmark = pytest.mark.usefixtures("spark")

VARYING = ("created_at", "trigger_id")
"""System properties that name ids and times: they differ between two databases."""


def snapshot(db: sluice.Database) -> dict[str, list[str]]:
    """Every queue's messages in any state, ids and times aside, in a canonical order."""
    found: dict[str, list[str]] = {}
    for name in sorted(db.rules.application.queues):
        messages = []
        for state in ("ready", "delayed", "claimed", "expired", "failed", "done"):
            for m in db.queue(name).browse(limit=100_000, state=state):
                props = {k: v for k, v in m.properties.items() if k not in VARYING}
                messages.append(json.dumps([state, m.body, props, m.content_type], sort_keys=True))
        found[name] = sorted(messages)
    return found


def spark_engine(spark: SparkSession, url: str, checkpoint: Path) -> Any:
    def engine(now: float) -> sluice.rules.engine.RunStats:
        return run_rules(spark, url, checkpoint=str(checkpoint), now=now)

    return engine


@pytest.fixture
def two(shared_url: str, tmp_path: Path) -> Iterator[tuple[sluice.Database, sluice.Database]]:
    """A database for the local engine and a fresh one beside it for Spark."""
    local = sluice.connect(f"sqlite:///{tmp_path / 'local.db'}")
    remote = sluice.connect(shared_url)
    yield local, remote
    remote.close()
    local.close()


def test_procurement_on_spark_gives_the_local_engines_results(
    spark: SparkSession, two: tuple[sluice.Database, sluice.Database], shared_url: str, tmp_path: Path
) -> None:
    local, remote = two
    expected = run_procurement_demo(local)
    got = run_procurement_demo(remote, engine=spark_engine(spark, shared_url, tmp_path / "ck"))
    assert got.checks == expected.checks
    assert got.ok
    assert sorted(got.customer) == sorted(expected.customer)
    assert got.alerts == expected.alerts
    assert snapshot(remote) == snapshot(local)
    assert (got.processed, got.errors) == (expected.processed, expected.errors)
