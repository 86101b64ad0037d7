"""Every benchmark family runs, at its smallest settings, so that bench code cannot rot.

Each runs as ``python -m bench NAME --quick`` (plus settings that make it smaller still) in a
process of its own, writing its report to a temporary file. A family whose servers do not
answer on loopback (PostgreSQL at 127.0.0.1:5432, RabbitMQ, Redis) or whose peers are not
installed (the bench extra, which `make test` installs) is skipped here and fails in CI; the
figures are not checked, only that a report is written.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import answers
from tests.conftest import unavailable

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

PG = ("127.0.0.1", 5432)
RABBIT = ("127.0.0.1", 5672)
REDIS = ("127.0.0.1", 6379)

# name -> (arguments after --quick, servers it needs, modules it needs)
FAMILIES: dict[str, tuple[list[str], list[tuple[str, int]], list[str]]] = {
    "cycle": (["--n", "100"], [], []),
    "concurrent": (["--total", "100"], [], []),
    "schema-cost": ([], [], []),
    "python-cost": ([], [], []),
    "commit-gap": ([], [], []),
    "threads": ([], [], []),
    "outside-sync": ([], [], []),
    "postgres": (["--only", "sluice", "--only", "floor", "--seconds", "1"], [PG], []),
    "wakeup": (["--n", "10"], [PG], []),
    "backlog": ([], [PG], ["pgqueuer"]),
    "pgbench-cycle": ([], [PG, RABBIT], ["pika"]),
    "content": (
        [
            "--backends",
            "sqlite",
            "--messages",
            "2000",
            "--throughput-messages",
            "500",
            "--samples",
            "20",
            "--scan-samples",
            "2",
            "--scan-budget",
            "2",
            "--alt-samples",
            "2",
            "--alt-budget",
            "2",
        ],
        [],
        [],
    ),
    "isolation": (
        ["--backends", "sqlite", "--messages", "200", "--large", "500", "--take", "200"],
        [],
        ["pika"],
    ),
    "topics": (["--only", "sqlite"], [], []),
    "rules": (["--only", "sqlite", "--no-profile"], [], []),
    "server": (["--only", "sqlite", "--repeats", "1"], [RABBIT], ["pika"]),
    "sqs": (["--only", "sqlite"], [], ["boto3"]),
    "gateways": (["--only", "dropbox"], [], []),
    "jobs": (["--peers", "rq", "--n", "100", "--workers", "1"], [PG, REDIS], ["rq"]),
    "celery": (
        ["--only", "sluice-sqlite", "--only", "rabbitmq"],
        [RABBIT],
        ["celery", "sluice.contrib.kombu"],
    ),
    "memory": (["--n", "500", "--only", "worker-sqlite"], [], []),
    "soak": ([], [PG], []),
}
"""Spark's benchmarks (spark, rules-spark) start a JVM each and the mixed soak runs minutes:
they are left to ``make bench-spark``, ``make bench-rules`` and ``make soak-mixed``."""


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_benchmark_runs_at_its_smallest_settings(name: str, tmp_path: Path) -> None:
    extra, servers, modules = FAMILIES[name]
    for host, port in servers:
        if not answers(host, port):
            unavailable(f"{name} needs a server at {host}:{port}")
    for module in modules:
        if importlib.util.find_spec(module) is None:
            unavailable(f"{name} needs {module} (the bench extra)")
    out = tmp_path / f"{name}.md"
    argv = [sys.executable, "-m", "bench", name, "--quick", *extra, "--out", str(out)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.read_text().strip(), done.stderr[-3000:]


@pytest.mark.parametrize("keep_up", [False, True], ids=["backlog", "keeping up"])
def test_the_topics_profile_prints_its_parts(keep_up: bool) -> None:
    """bench topics-profile prints, writes no report: its table, for both of its workloads."""
    argv = [sys.executable, "-m", "bench", "topics-profile", "--url", "sqlite"]
    argv += ["--subscriptions", "2", "--messages", "20", "--rounds", "1"]
    argv += ["--keep-up"] if keep_up else []
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for part in ("pull", "claim", "machine busy CPU", "deliveries/s"):
        assert part in done.stdout, done.stdout
