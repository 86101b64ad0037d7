"""Pipelines from queue to queue: the API on both backends, and the ``sluice pipeline`` command."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import sluice
from sluice.spark import run_pipeline

pytestmark = pytest.mark.usefixtures("spark")

ROOT = Path(__file__).resolve().parents[2]
ORDER = "id BIGINT, customer STRING, country STRING, express BOOLEAN, total DOUBLE"
ORDERS = [
    {"id": 1, "customer": "Smith", "country": "NL", "express": True, "total": 39.0},
    {"id": 2, "customer": "Jones", "country": None, "express": False, "total": 12.0},
    {"id": 3, "customer": "Lee", "country": "DE", "express": False, "total": 5.5},
]


@pytest.fixture
def db(shared_url: str) -> Iterator[sluice.Database]:
    with sluice.connect(shared_url) as database:
        for name in ("orders", "billing", "shipping"):
            database.create_queue(name)
        database.queue("orders").put_many(ORDERS)
        yield database


def _bodies(db: sluice.Database, queue: str) -> list[Any]:
    return [m.body for m in db.queue(queue).browse(limit=1000)]


def test_sql_routes_orders_into_billing_and_shipping(
    spark: SparkSession, db: sluice.Database, shared_url: str, tmp_path: Path
) -> None:
    query = run_pipeline(
        spark,
        shared_url,
        source="orders",
        name="router",
        checkpoint=str(tmp_path / "ck"),
        body_schema=ORDER,
        sql={
            "billing": "SELECT named_struct('order', body.id, 'total', body.total) AS body, "
            "CAST(body.id AS STRING) AS correlation_id FROM messages",
            "shipping": "SELECT named_struct('order', body.id) AS body, "
            "CASE WHEN body.express THEN 9 ELSE 0 END AS priority FROM messages "
            "WHERE body.country IS NOT NULL",
        },
        max_per_batch=2,
    )
    # Two batches of at most two; each target's query reads a batch once.
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [4, 2]
    billing = db.queue("billing").browse()
    assert sorted((m.body["order"], m.body["total"], m.correlation_id) for m in billing) == [
        (1, 39.0, "1"),
        (2, 12.0, "2"),
        (3, 5.5, "3"),
    ]
    # Express first: priority came from the SQL.
    assert [(m.body["order"], m.priority) for m in db.queue("shipping").browse()] == [
        (1, 9),
        (3, 0),
    ]
    assert db.queue("orders").stats()["ready"] == db.queue("orders").stats()["claimed"] == 0


def test_an_exclusive_pipeline_reads_by_range_and_deletes_what_it_published(
    spark: SparkSession, db: sluice.Database, shared_url: str, tmp_path: Path
) -> None:
    common: dict[str, Any] = {
        "source": "orders",
        "name": "sole-reader",
        "checkpoint": str(tmp_path / "ck"),
        "body_schema": ORDER,
        "target": "billing",
        "sql": "SELECT named_struct('order', body.id) AS body FROM messages",
        "max_per_batch": 2,
        "exclusive": True,
    }
    run_pipeline(spark, shared_url, **common)
    assert [b["order"] for b in _bodies(db, "billing")] == [1, 2, 3]
    assert len(db.queue("orders")) == 0  # each range deleted with its batch's commit
    db.queue("orders").put({"id": 4, "customer": "Ng", "country": "FR", "express": False,
                            "total": 1.0})  # fmt: skip
    run_pipeline(spark, shared_url, **common)  # the same checkpoint: on from its position
    assert [b["order"] for b in _bodies(db, "billing")] == [1, 2, 3, 4]
    db.create_queue("lanes", isolation="ordered")
    lanes = common | {"source": "lanes", "name": "lanes-reader"}
    lanes["checkpoint"] = str(tmp_path / "ck2")
    with pytest.raises(Exception, match="does not allow"):  # as Spark wraps the source's error
        run_pipeline(spark, shared_url, **lanes)
    assert len(db.queue("billing")) == 4


def test_transform_function_with_a_selector_and_a_target(
    spark: SparkSession, db: sluice.Database, shared_url: str, tmp_path: Path
) -> None:
    def big_spenders(messages: Any) -> Any:
        return messages.selectExpr("body", "priority + 1 AS priority")

    run_pipeline(
        spark,
        shared_url,
        source="orders",
        name="big",
        checkpoint=str(tmp_path / "ck"),
        transform=big_spenders,
        where="body.total >= 10",
        target="billing",
    )
    assert sorted(b["id"] for b in _bodies(db, "billing")) == [1, 2]
    assert {m.priority for m in db.queue("billing").browse()} == {1}
    assert [b["id"] for b in _bodies(db, "orders")] == [3]  # the selector left it


def test_a_pipeline_checks_what_it_is_given(
    spark: SparkSession, db: sluice.Database, shared_url: str, tmp_path: Path
) -> None:
    common: dict[str, Any] = {"name": "bad", "checkpoint": str(tmp_path / "ck")}
    with pytest.raises(sluice.ConfigurationError, match="either sql or transform"):
        run_pipeline(spark, shared_url, source="orders", **common)
    with pytest.raises(sluice.QueueNotFound, match="nowhere"):
        run_pipeline(spark, shared_url, source="nowhere", sql="SELECT body FROM messages", **common)
    with pytest.raises(sluice.QueueNotFound, match="invoices"):
        run_pipeline(
            spark,
            shared_url,
            source="orders",
            sql={"invoices": "SELECT body FROM messages"},
            **common,
        )
    with pytest.raises(sluice.ConfigurationError, match="no queue column"):
        run_pipeline(spark, shared_url, source="orders", sql="SELECT body FROM messages", **common)
    with pytest.raises(sluice.ConfigurationError, match="body column"):
        run_pipeline(
            spark,
            shared_url,
            source="orders",
            sql="SELECT id FROM messages",
            target="billing",
            **common,
        )
    assert len(db.queue("orders")) == 3  # nothing was taken


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[tuple[sluice.Database, str]]:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with sluice.connect(url) as database:
        for name in ("orders", "billing", "shipping"):
            database.create_queue(name)
        database.queue("orders").put_many(ORDERS)
        yield database, url


def test_the_pipeline_command(sqlite_db: tuple[sluice.Database, str], tmp_path: Path) -> None:
    """The command on SQLite; the API above runs on both backends."""
    db, shared_url = sqlite_db
    command = [
        sys.executable,
        "-m",
        "sluice.cli",
        "pipeline",
        "orders",
        "--db",
        shared_url,
        "--name",
        "cli-router",
        "--checkpoint",
        str(tmp_path / "ck"),
        "--body-schema",
        ORDER,
        "--to",
        "billing=SELECT named_struct('order', body.id, 'total', body.total) AS body FROM messages",
        "--to",
        "shipping=SELECT named_struct('order', body.id) AS body FROM messages "
        "WHERE body.country IS NOT NULL",
        "--master",
        "local[2]",
        "--json",
    ]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"batches": 1, "input_rows": 6}
    assert sorted(b["order"] for b in _bodies(db, "billing")) == [1, 2, 3]
    assert sorted(b["order"] for b in _bodies(db, "shipping")) == [1, 3]
    assert len(db.queue("orders")) == 0

    bad = subprocess.run(
        [*command[:5], "--db", shared_url, "--name", "x", "--checkpoint", "ck", "--to", "billing"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2
    assert "QUEUE=SQL" in bad.stderr
