"""``python -m bench otel``: N puts then N get+acks in one process, per mode, in rounds
that alternate the modes (the machine's drift falls on all alike):

- ``before``: the tree of ``--before`` (a commit, extracted with ``git archive``), which
  has no observer seam: the baseline;
- ``off``: this tree, telemetry off (the default: ``context.observer`` is None);
- ``on``: this tree, ``sluice.contrib.otel.instrument`` with the SDK's tracer provider
  (a BatchSpanProcessor into an exporter that drops the spans) and a meter provider.

Each run is a subprocess, so no mode warms another's caches. Reported: the median
messages per second of each mode and backend, and the ratios off/before and on/off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

from bench.harness import machine_facts, source_revision
from bench.harness.report import facts_table, write_report

ROOT = Path(__file__).resolve().parents[2]

# The workload, run as ``python -c`` in a subprocess: prints {"put": s, "get": s}.
WORKLOAD = """
import json, sys, tempfile, time, pathlib
import sluice
mode, backend, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tmp = tempfile.mkdtemp()
url = "memory://" if backend == "memory" else f"sqlite:///{tmp}/q.db"
db = sluice.connect(url)
if mode == "on":
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    from sluice.contrib import otel
    otel.instrument(db, tracer_provider=provider, meter_provider=MeterProvider())
q = db.create_queue("bench", durability="transient")
body = {"order": 1, "lines": [1, 2, 3]}
for _ in range(200):  # warm-up
    q.put(body); q.get().ack()
start = time.perf_counter()
for _ in range(n):
    q.put(body)
put = time.perf_counter() - start
start = time.perf_counter()
for _ in range(n):
    q.get().ack()
got = time.perf_counter() - start
db.close()
print(json.dumps({"put": put, "get": got}))
"""


def extract(revision: str, into: Path) -> Path:
    """The ``src`` of ``revision``, extracted under ``into`` (the repository is untouched)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision, "src"], cwd=ROOT, check=True,
        capture_output=True,
    ).stdout  # fmt: skip
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def run(src: Path, mode: str, backend: str, n: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("SLUICE_OTEL", None)
    done = subprocess.run(
        [sys.executable, "-c", WORKLOAD, mode, backend, str(n)], env=env, check=True,
        capture_output=True, text=True,
    )  # fmt: skip
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench otel", description=__doc__)
    parser.add_argument("--before", default="e90b9f7", help="the baseline commit")
    parser.add_argument("-n", type=int, default=3000, help="messages per run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", default="memory,sqlite")
    parser.add_argument("--out", type=Path, default=None)
    ns = parser.parse_args(argv)
    backends = ns.backends.split(",")
    modes = ("before", "off", "on")
    rates: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": extract(ns.before, Path(tmp)), "off": ROOT / "src", "on": ROOT / "src"}
        for _ in range(ns.rounds):
            for backend in backends:
                for mode in modes:
                    timed = run(trees[mode], mode, backend, ns.n)
                    for step in ("put", "get"):
                        rates.setdefault((backend, step, mode), []).append(ns.n / timed[step])
    lines = [
        "# Telemetry's cost: put, then get + ack, one message per transaction, in-process",
        "",
        f"{ns.n} messages per run, {ns.rounds} rounds alternating the modes, median msg/s; "
        "a transient queue (no fsync per commit), so the engine's own work dominates. "
        f"Baseline: commit {ns.before} (no observer seam); tree: {source_revision()}.",
        "",
        *facts_table(machine_facts(Path(tempfile.gettempdir()), ["opentelemetry-sdk"])),
        "",
        "| backend | step | before | off | on | off / before | on / off |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend in backends:
        for step in ("put", "get"):
            m = {mode: statistics.median(rates[(backend, step, mode)]) for mode in modes}
            lines.append(
                f"| {backend} | {step} | {m['before']:,.0f} | {m['off']:,.0f} | {m['on']:,.0f} "
                f"| {m['off'] / m['before']:.3f} | {m['on'] / m['off']:.3f} |"
            )
    write_report("otel", "\n".join(lines) + "\n", ns.out)


if __name__ == "__main__":
    main()
