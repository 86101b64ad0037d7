"""Resident memory does not grow with the backlog a worker or a Spark stream drains.

``bench/memory.py`` drains 1,000,000-message backlogs and reports the figures
(bench/results/memory-*.md); these tests hold the same bounds on smaller
backlogs, in processes of their own, measured from /proc.
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

CHILD = Path(__file__).with_name("memory_child.py")
WORKER_BOUND_MB = 200  # as bench/memory.py states them
SPARK_BOUND_MB = 2_500

pytestmark = pytest.mark.slow


def _resident_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0.0


def _tree_mb(pid: int) -> float:
    """A process's resident size with all its descendants' (Spark: the JVM, its workers)."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += _resident_mb(current)
        try:
            tasks = list(Path(f"/proc/{current}/task").glob("*"))
        except FileNotFoundError:  # it ended since its parent listed it
            continue
        for task in tasks:
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except (FileNotFoundError, ProcessLookupError):
                continue
    return total


def test_a_worker_taking_from_a_large_backlog_stays_within_its_bound(shared_url: str) -> None:
    backlog, taken = 200_000, 30_000
    with sluice.connect(shared_url) as db:
        db.jobs.define("noop")
        for start in range(0, backlog, 10_000):
            db.jobs.submit_tasks("noop", list(range(start, start + 10_000)))
        child = subprocess.run(
            [sys.executable, str(CHILD), shared_url, str(taken)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        report = json.loads(child.stdout)
        assert report["ran"] == taken
        # Python and sluice (~50 MB) and, on SQLite, page caches of at most 64 MiB each.
        assert report["peak_mb"] < WORKER_BOUND_MB
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
            [sys.executable, str(CHILD), url, "spark", str(tmp_path / "checkpoint")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as child:
            assert child.stdout is not None
            assert json.loads(child.stdout.readline()) == {"ready": True}
            peaks: list[float] = []

            def sample() -> None:
                while child.poll() is None:
                    peaks.append(_tree_mb(child.pid))
                    time.sleep(0.2)  # sampling another process: nothing to wait on

            sampler = threading.Thread(target=sample)
            sampler.start()
            done = child.stdout.readline()
            child.wait(timeout=300)
            sampler.join()
        assert json.loads(done) == {"rows": backlog}
        assert len(db.queue("feed")) == 0
        assert max(peaks) < SPARK_BOUND_MB
