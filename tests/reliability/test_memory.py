"""Resident memory does not grow with the backlog a worker or a Spark stream drains.

``bench/memory/__main__.py`` drains 1,000,000-message backlogs and reports the figures
(bench/results/memory-*.md); these tests hold the same bounds on smaller
backlogs, in processes of their own (its probe, bench/memory/probe.py), measured from
/proc.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import sluice
from bench.memory import SPARK_BOUND_MB, WORKER_BOUND_MB
from bench.memory.probe import tree_mb

ROOT = Path(__file__).resolve().parents[2]
PROBE = [sys.executable, "-m", "bench.memory.probe"]  # run from ROOT, where bench is

pytestmark = pytest.mark.slow


def test_a_worker_taking_from_a_large_backlog_stays_within_its_bound(shared_url: str) -> None:
    backlog, taken = 200_000, 30_000
    with sluice.connect(shared_url) as db:
        db.jobs.define("noop")
        for start in range(0, backlog, 10_000):
            db.jobs.submit_tasks("noop", list(range(start, start + 10_000)))
        child = subprocess.run(
            [*PROBE, "worker", shared_url, str(taken)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        report = json.loads(child.stdout.splitlines()[-1])
        assert report["ran"] == taken
        # Python and sluice (~50 MB) and, on SQLite, page caches of at most 64 MiB each.
        assert report["own_peak_mb"] < WORKER_BOUND_MB
        assert db.queue("tasks.noop").stats()["ready"] == backlog - taken


@pytest.mark.usefixtures("spark")  # pyspark and Java, or a skip (a failure in CI)
def test_a_spark_stream_reading_a_backlog_stays_within_its_bound(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'feed.db'}"
    backlog = 60_000
    with sluice.connect(url) as db:
        db.create_queue("feed")
        for start in range(0, backlog, 10_000):
            db.queue("feed").put_many([{"n": n} for n in range(start, start + 10_000)])
        with subprocess.Popen(
            [*PROBE, "spark", url, "feed", str(tmp_path / "checkpoint")],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as child:
            assert child.stdout is not None
            assert "rss_mb" in json.loads(child.stdout.readline())  # its session is up
            peaks: list[float] = []

            def sample() -> None:
                while child.poll() is None:
                    peaks.append(tree_mb(child.pid))
                    time.sleep(0.2)  # sampling another process: nothing to wait on

            sampler = threading.Thread(target=sample)
            sampler.start()
            done = child.stdout.readline()
            child.wait(timeout=300)
            sampler.join()
        assert json.loads(done)["ran"] == backlog
        assert len(db.queue("feed")) == 0
        assert max(peaks) < SPARK_BOUND_MB
