"""Rules on Spark (sluice.spark.rules): the local engine's results, set at a time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import sluice
from sluice.demo.procurement import (
    START,
    queue_contents,
    run_procurement_demo,
    run_procurement_workload,
)
from sluice.errors import ConfigurationError
from sluice.rules.plan import SYSTEM_ERRORS
from sluice.spark.rules import run_rules
from tests.contract.test_rules_arrival import ACCOUNTS

pytestmark = pytest.mark.usefixtures("spark")

snapshot = queue_contents


def spark_engine(spark: SparkSession, url: str, checkpoint: Path) -> Any:
    def engine(now: float) -> sluice.rules.engine.RunStats:
        return run_rules(spark, url, checkpoint=str(checkpoint), now=now)

    return engine


# Alone, in make test's serial run: its streaming queries each start a Python source
# runner, and Spark gives a runner 10 s (not configurable) to connect back; beside
# three other workers on two cores that ran out in two full runs of 2026-12-05.
@pytest.mark.serial
def test_procurement_on_spark_gives_the_local_engines_results(
    spark: SparkSession,
    two: tuple[sluice.Database, sluice.Database],
    shared_url: str,
    tmp_path: Path,
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


REQUESTS = 2_000
"""The generated workload's size here (python -m bench rules-spark runs tens of thousands)."""


@pytest.mark.parametrize("shared_url", ["postgresql"], indirect=True)  # SQLite: procurement's
def test_a_generated_workload_on_spark_gives_the_local_engines_queues(
    spark: SparkSession,
    two: tuple[sluice.Database, sluice.Database],
    shared_url: str,
    tmp_path: Path,
) -> None:
    local, remote = two
    expected = run_procurement_workload(local, REQUESTS)
    got = run_procurement_workload(
        remote, REQUESTS, engine=spark_engine(spark, shared_url, tmp_path / "ck")
    )
    assert [(p, s.processed, s.errors) for p, _, s in got.phases] == [
        (p, s.processed, s.errors) for p, _, s in expected.phases
    ]
    assert snapshot(remote) == snapshot(local)
    assert len(remote.queue("customer")) > REQUESTS // 2  # offers, refusals, reminders


TYPED = """
CREATE QUEUE orders; CREATE QUEUE billing;
CREATE PROPERTY total AS real QUEUE billing VALUE body.total;
CREATE RULE route FOR orders IF body.id > 0 THEN
    ENQUEUE json_object('order', body.id, 'total', body.total) INTO billing;
"""


def test_a_batch_the_sql_enqueue_refuses_is_evaluated_in_full_on_spark(
    spark: SparkSession,
    two: tuple[sluice.Database, sluice.Database],
    shared_url: str,
    tmp_path: Path,
) -> None:
    """Spark computes only what the SQL enqueue needs; a batch with a message whose
    computed property breaks its type goes by Python, which needs every column (the
    bodies, the message's own parts): the same messages and error as locally."""
    local, remote = two
    orders = [{"id": i, "total": "lots" if i == 7 else i * 1.5} for i in range(1, 41)]
    for db in two:
        db.rules.apply(TYPED)
        db.queue("orders").put_many(orders)
    expected = local.rules.run_until_idle()
    got = run_rules(spark, shared_url, checkpoint=str(tmp_path / "ck"))
    assert (got.processed, got.errors) == (expected.processed, expected.errors) == (40, 1)
    assert snapshot(remote) == snapshot(local)
    assert len(remote.queue("billing")) == 39
    errors = {  # the time of the error aside: each engine's own clock
        db: [
            {k: v for k, v in m.body.items() if k != "at"}
            for m in db.queue(SYSTEM_ERRORS).browse(limit=10)
        ]
        for db in two
    }
    assert errors[remote] == errors[local]
    assert [e["trigger"]["body"] for e in errors[local]] == [{"id": 7, "total": "lots"}]


KEYED_RESET = """
CREATE QUEUE a; CREATE QUEUE b;
CREATE PROPERTY k AS text QUEUE a VALUE body.k;
CREATE SLICING s ON k;
CREATE RULE r FOR a IF true THEN RESET s KEY 'x';
"""
READS_WHAT_IT_WRITES = """
CREATE QUEUE a; CREATE QUEUE seen;
CREATE RULE r FOR a
  IF NOT EXISTS (SELECT 1 FROM queue('seen') AS s WHERE CAST(s.body.id AS DOUBLE) = body.id)
  THEN ENQUEUE body INTO seen;
"""


@pytest.mark.parametrize(
    ("text", "named"),
    [(KEYED_RESET, "rule 'r': RESET s KEY"), (READS_WHAT_IT_WRITES, "queue('seen')")],
)
def test_what_cannot_run_on_spark_is_refused_when_applied(
    spark: SparkSession, shared_url: str, tmp_path: Path, text: str, named: str
) -> None:
    with pytest.raises(ConfigurationError, match="cannot run on Spark") as refused:
        run_rules(spark, shared_url, text, checkpoint=str(tmp_path / "ck"))
    assert named in str(refused.value)
    with sluice.connect(shared_url) as db:
        assert not db.rules.application.rules  # nothing was applied
        db.apply(text)  # the local engine runs it
        with pytest.raises(ConfigurationError, match="cannot run on Spark"):
            run_rules(spark, shared_url, checkpoint=str(tmp_path / "ck"))


CHAIN = """
CREATE QUEUE orders; CREATE QUEUE billing; CREATE QUEUE shipping; CREATE QUEUE audit;
CREATE PROPERTY total AS real QUEUE billing VALUE body.total;
CREATE RULE route FOR orders IF body.total > 0 THEN
    ENQUEUE json_object('order', body.id, 'total', body.total) INTO billing,
    ENQUEUE json_object('order', body.id) INTO shipping
  ELSE ENQUEUE body INTO audit;
CREATE RULE bill FOR billing IF props.total > 100 THEN
    ENQUEUE json_object('big', body.order) INTO audit;
"""
ORDERS = 3_000
PER_BATCH = 300
ROOT = Path(__file__).resolve().parents[2]


def _driver(url: str, checkpoint: Path, log: Path, **env: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:  # a session of its own: a kill takes the JVM along
        return subprocess.Popen(
            [sys.executable, "-m", "tests.spark.rules_child", url, str(checkpoint),
             str(PER_BATCH), repr(START)],
            cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def _finish(process: subprocess.Popen[bytes], log: Path) -> int:
    try:
        return process.wait(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(f"the rules driver did not finish; its log:\n{log.read_text()[-4000:]}")


@pytest.mark.parametrize("shared_url", ["postgresql"], indirect=True)
def test_the_driver_killed_mid_run_then_restarted_gives_the_same_result(
    two: tuple[sluice.Database, sluice.Database], shared_url: str, tmp_path: Path
) -> None:
    local, remote = two
    for db in (local, remote):
        db.clock = sluice.ManualClock(START)
        db.apply(CHAIN)
        db.queue("orders").put_many(
            [{"id": n, "total": (n * 37) % 250 - 20} for n in range(ORDERS)]
        )
    local.rules.run_until_idle()
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "driver.log"
    # kill -9 from outside, once Spark has committed a batch and the run goes on ...
    first = _driver(shared_url, checkpoint, log)
    deadline = time.monotonic() + 300
    while not (checkpoint / "commits" / "0").exists():  # the event: batch 0 is committed
        if first.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"the driver ended before batch 1; log:\n{log.read_text()[-4000:]}")
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    # ... then a driver that kills itself inside a micro-batch: one queue's part of
    # batch 1 committed in the database, the rest of it and Spark's commit log not.
    assert (
        _finish(_driver(shared_url, checkpoint, log, SLUICE_SPARK_FAULT="after_rules_queue"), log)
        != 0
    )
    assert len(remote.queue("orders")) < ORDERS, "the first run should have processed some"
    assert _finish(_driver(shared_url, checkpoint, log), log) == 0
    assert snapshot(remote) == snapshot(local)
    assert len(remote.queue("billing").browse(limit=ORDERS, state="done")) == 0  # removed
    assert sorted(m.body["order"] for m in remote.queue("shipping").browse(limit=ORDERS)) == [
        n for n in range(ORDERS) if (n * 37) % 250 - 20 > 0
    ]


def test_sluice_run_with_the_spark_engine(tmp_path: Path) -> None:
    path = tmp_path / "shop.db"
    rules = tmp_path / "chain.rules"
    rules.write_text(CHAIN)
    with sluice.connect(f"sqlite:///{path}") as db:
        db.apply(CHAIN)
        db.queue("orders").put_many([{"id": n, "total": n * 60 - 10} for n in range(5)])
    command = [sys.executable, "-m", "sluice.cli", "run", str(rules), "--db", str(path),
               "--engine", "spark", "--once", "--master", "local[2]",
               "--checkpoint", str(tmp_path / "ck")]  # fmt: skip
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "micro-batch(es) on Spark, 9 message(s) processed" in result.stderr
    with sluice.connect(f"sqlite:///{path}") as db:
        assert sorted(m.body["order"] for m in db.queue("shipping").browse()) == [1, 2, 3, 4]
        assert [m.body for m in db.queue("audit").browse()] == [
            {"id": 0, "total": -10},
            {"big": 2},
            {"big": 3},
            {"big": 4},
        ]
    missing = subprocess.run(
        command[:-2], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert missing.returncode != 0
    assert "--checkpoint" in missing.stderr


def test_arrival_order_across_a_slicings_queues_on_spark(
    spark: SparkSession, shared_url: str, tmp_path: Path
) -> None:
    """The local engine's arrival order (rules/arrival.py) in a micro-batch too: a
    transfer that resets the slice between two registrations is processed between them."""
    with sluice.connect(shared_url) as db:
        db.apply(ACCOUNTS)
        expected, held = [], 0
        for n in range(30):
            if n % 7 == 3:
                db.queue("transfers").put({"account": "A"})
                held = 0
            else:
                db.queue("registrations").put({"account": "A", "who": n})
                held += 1
                expected.append({"who": n, "held": held})
        stats = run_rules(spark, shared_url, checkpoint=str(tmp_path / "ck"))
        assert stats.processed == 30
        assert [m.body for m in db.queue("counts").browse(limit=100)] == expected
