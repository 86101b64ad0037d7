"""Exactly once under faults: a pipeline's driver is killed, or dies between publish and commit.

Each run is a driver process of its own (``pipeline_child``): orders -> Spark
SQL -> out, as the stream ``crash-test``; ``orders`` is a queue, or a subscription
(read by position). After the fault the same command runs
again from the same checkpoint, as an operator would restart it. Every input
must then be in ``out`` exactly once, ``orders`` empty, and nothing staged or
held left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = 600
"""Six batches: the kill after the third commit leaves three to go (slack for the kill)."""
PER_BATCH = 100
DEADLINE = 300.0


@pytest.fixture(params=["queue", "subscription"])
def db(shared_url: str, request: pytest.FixtureRequest) -> Iterator[sluice.Database]:
    """``orders``: a queue (read by claimed rounds), or a subscription (read by position)."""
    with sluice.connect(shared_url) as database:
        if request.param == "queue":
            database.create_queue("orders")
            source = "orders"
        else:
            database.create_topic("feed")
            database.subscribe("feed", "orders", where="body.n >= 0")
            source = "feed"
        database.create_queue("out")
        database.queue(source).put_many([{"n": n} for n in range(MESSAGES)])
        yield database


def _driver(url: str, checkpoint: Path, log: Path, **env: str) -> subprocess.Popen[bytes]:
    # A session of its own: the kill takes the JVM and its Python workers along.
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.spark.pipeline_child",
                url,
                str(checkpoint),
                str(PER_BATCH),
            ],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _finish(process: subprocess.Popen[bytes], log: Path) -> int:
    try:
        return process.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(f"the pipeline driver did not finish; its log:\n{log.read_text()[-4000:]}")


def _succeeds(process: subprocess.Popen[bytes], log: Path) -> None:
    """The driver drains the queue and exits 0; if not, the failure shows its log."""
    if (code := _finish(process, log)) != 0:
        pytest.fail(f"the pipeline driver exited {code}; its log:\n{log.read_text()[-8000:]}")


def _assert_exactly_once(db: sluice.Database) -> None:
    bodies = [m.body for m in db.queue("out").browse(limit=MESSAGES * 2)]
    assert sorted(b["n"] for b in bodies) == list(range(MESSAGES))
    assert all(b["doubled"] == 2 * b["n"] for b in bodies)
    assert db.queue("orders").stats() == dict.fromkeys(
        ("ready", "delayed", "pending", "claimed", "expired", "failed", "done"), 0
    )
    assert db.queue("out").stats()["pending"] == 0  # no staged rows of killed tasks remain
    assert all(s.lag == 0 for s in db.subscriptions())  # a subscription passed everything


# Each source on one backend (a driver run costs a minute): the queue's rounds on SQLite,
# the subscription's positions on PostgreSQL; the sink's crash below runs on both.
@pytest.mark.parametrize(
    ("shared_url", "db"),
    [("sqlite", "queue"), ("postgresql", "subscription")],
    indirect=True,
)
def test_driver_killed_mid_stream_then_restarted(
    db: sluice.Database, shared_url: str, tmp_path: Path
) -> None:
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "driver.log"
    first = _driver(shared_url, checkpoint, log)
    third_commit = checkpoint / "commits" / "2"
    deadline = time.monotonic() + DEADLINE
    while not third_commit.exists():  # the event: Spark has committed three batches
        if first.poll() is not None or time.monotonic() > deadline:
            pytest.fail(
                f"the driver ended or stalled before batch 2; log:\n{log.read_text()[-4000:]}"
            )
        time.sleep(0.05)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    done = len(db.queue("out").browse(limit=MESSAGES))
    assert PER_BATCH * 3 <= done < MESSAGES, "the kill should land mid-stream"

    _succeeds(_driver(shared_url, checkpoint, log), log)
    _assert_exactly_once(db)


@pytest.mark.parametrize("db", ["queue"], indirect=True)  # the sink's part: one source will do
def test_crash_between_the_sinks_publish_and_sparks_commit_log(
    db: sluice.Database, shared_url: str, tmp_path: Path
) -> None:
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "driver.log"
    faulty = _driver(shared_url, checkpoint, log, SLUICE_SPARK_FAULT="after_publish")
    assert _finish(faulty, log) != 0
    # Batch 0 is in the queue, planned in the offset log, and not in the commit log.
    assert len(db.queue("out").browse(limit=MESSAGES)) == PER_BATCH
    assert (checkpoint / "offsets" / "0").exists()
    assert not (checkpoint / "commits" / "0").exists()

    _succeeds(_driver(shared_url, checkpoint, log), log)
    _assert_exactly_once(db)
