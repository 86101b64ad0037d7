"""The mixed soak: queues, topics, rules and HTTP at once, for a long time, at half their maximum.

Run: ``python -m bench soak-mixed --backend sqlite --minutes 30`` (``make soak-mixed`` runs
SQLite and PostgreSQL). Four streams share one database, each producer and consumer a process
of its own (bench/soak/actor.py):

- queue: a producer puts batches of 10 into ``orders``, a consumer takes them (batches of 10);
- topic: a producer publishes batches of 10 to ``events``, two subscriptions each consumed;
- rules: a producer puts into ``inbound``; ``sluice run`` routes each message into ``routed``
  by a rule; a consumer takes from ``routed``;
- http: a client puts batches of 10 into ``web`` through ``sluice serve``, another leases
  them and acknowledges each by its token.

First each stream runs alone with its producer unpaced for ``--calibrate`` seconds: what
its consumer then takes per second (after the first sixth) is its maximum on this machine.
Then, for ``--minutes``, all four run at once, each producer paced to ``--load`` (0.5) x its
stream's maximum / 4: together, about half of what the machine can do for this mix. Per
window: each stream's messages/s and p99 latency (producer's clock before its commit to
consumer's after its dequeue), each process's resident memory, and the database's own growth
(SQLite: the WAL file; PostgreSQL: dead and live tuples of the schema and its size). Drift:
the last third of the windows against the first. Writes ``bench/results/soak-mixed-<date>.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sluice
from bench.harness import (
    PG_CONNINFO,
    SchemaGuard,
    add_common_options,
    host_facts,
    package_versions,
    pg_conninfo,
    pg_facts,
    write_report,
)
from bench.server.procs import Server, child_environment, sluice_serve

SCHEMA = "bench_soak_mixed"
_SETTLE = 2.0
BATCH = 10
RULES = """
CREATE QUEUE inbound;
CREATE QUEUE routed;
CREATE RULE route FOR inbound IF true THEN ENQUEUE body INTO routed;
"""
# Stream -> (producer's queue, consumers' queues).
STREAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "queue": ("orders", ("orders",)),
    "topic": ("events", ("s1", "s2")),
    "rules": ("inbound", ("routed",)),
    "http": ("web", ("web",)),
}


def prepare(url: str) -> str:
    """The queues, topic, subscriptions and rule; returns the secret of the HTTP key."""
    from sluice.server.grants import Grant, Keys

    with sluice.connect(url) as db:
        db.create_queue("orders")
        db.create_topic("events")
        db.subscribe("events", "s1")
        db.subscribe("events", "s2")
        db.create_queue("web")
        db.rules.apply(RULES)
        return Keys(db).add("soak", [Grant.parse("web:produce,consume")])


@dataclass
class Sample:
    """What the driver read at the end of one window."""

    rss_mb: dict[str, float] = field(default_factory=dict)  # process -> resident MB
    store: dict[str, float] = field(default_factory=dict)  # database growth figures


@dataclass
class Phase:
    """A run of the actors: their window reports and the driver's samples."""

    width: float
    events: list[dict[str, Any]] = field(default_factory=list)
    samples: dict[int, Sample] = field(default_factory=dict)

    def rate(self, stream: str, role: str, window: int) -> float:
        n = sum(
            e["n"]
            for e in self.events
            if e["stream"] == stream and e["role"] == role and e["window"] == window
        )
        return float(n) / self.width

    def p99(self, stream: str, window: int) -> float | None:
        found = [
            e["lat"]["p99"]
            for e in self.events
            if e["stream"] == stream and e["role"] == "take" and e["window"] == window and e["lat"]
        ]
        return float(max(found)) if found else None

    def windows(self) -> list[int]:
        return sorted({e["window"] for e in self.events})


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _store(url: str) -> dict[str, float]:
    if url.startswith("sqlite"):
        wal = Path(url.removeprefix("sqlite:///") + "-wal")
        db_file = Path(url.removeprefix("sqlite:///"))
        return {
            "WAL MB": wal.stat().st_size / 2**20 if wal.exists() else 0.0,
            "file MB": db_file.stat().st_size / 2**20,
        }
    import psycopg

    with psycopg.connect(pg_conninfo(url), autocommit=True) as conn:
        dead, live = conn.execute(
            "SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(n_live_tup), 0)"
            " FROM pg_stat_user_tables WHERE schemaname = %s",
            (SCHEMA,),
        ).fetchone() or (0, 0)
        size = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'r'",
            (SCHEMA,),
        ).fetchone() or (0,)
    return {"dead tuples": float(dead), "live tuples": float(live), "MB": size[0] / 2**20}


class Actors:
    """The producer and consumer processes of one phase."""

    def __init__(self, url: str, server: Server, secret: str, width: float) -> None:
        self.url, self.server, self.secret, self.width = url, server, secret, width
        self.start = time.time()
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.phase = Phase(width)
        self._lock = threading.Lock()

    def spawn(self, name: str, role: str, *args: object) -> None:
        argv = [sys.executable, "-m", "bench.soak.actor", role, *map(str, args)]
        argv += [str(self.width), str(self.start)]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=child_environment())
        self.procs[name] = proc
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._lock:
                self.phase.events.append(json.loads(line))

    def start_all(self, rates: dict[str, float]) -> None:
        """The producers and consumers of the streams ``rates`` names."""
        port, secret = self.server.port, self.secret
        for stream, (target, sources) in STREAMS.items():
            if stream not in rates:
                continue
            if stream == "http":
                self.spawn(
                    "http put", "http-put", port, secret, stream, target, rates[stream], BATCH
                )
                self.spawn("http take", "http-take", port, secret, stream, target, BATCH)
                continue
            self.spawn(f"{stream} put", "put", self.url, stream, target, rates[stream], BATCH)
            for source in sources:
                consumer = stream if len(sources) == 1 else f"{stream}.{source}"
                self.spawn(f"{consumer} take", "take", self.url, consumer, source, BATCH)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def run_phase(
    url: str, *, server: Server, runner: subprocess.Popen[bytes], secret: str,
    rates: dict[str, float], seconds: float, width: float,
) -> Phase:  # fmt: skip
    actors = Actors(url, server, secret, width)
    actors.start_all(rates)
    others = {"sluice serve": server.pid, "sluice run": runner.pid}
    try:
        for index in range(int(seconds // width)):
            end = actors.start + (index + 1) * width
            time.sleep(max(0.0, end - time.time()))  # the window's end: sample then
            sample = Sample(store=_store(url))
            for name, pid in {**{n: p.pid for n, p in actors.procs.items()}, **others}.items():
                sample.rss_mb[name] = _rss_mb(pid)
            actors.phase.samples[index] = sample
            if index:  # the window before: its reports came in meanwhile
                print(f"  window {index - 1}: {_line(actors.phase, index - 1)}", flush=True)
        # A consumer reports a window at its first dequeue after it (0.5 s at most idle).
        time.sleep(_SETTLE)
    finally:
        actors.stop()
    return actors.phase


def _consumers() -> list[str]:
    out = []
    for stream, (_, sources) in STREAMS.items():
        out += [stream] if len(sources) == 1 else [f"{stream}.{s}" for s in sources]
    return out


def _line(phase: Phase, index: int) -> str:
    parts = []
    for consumer in _consumers():
        p99 = phase.p99(consumer, index)
        rate = phase.rate(consumer, "take", index)
        stream = consumer.split(".")[0]
        parts.append(f"{stream} put {phase.rate(stream, 'put', index):,.0f}/s")
        parts.append(
            f"{consumer} {rate:,.0f}/s p99 {'-' if p99 is None else f'{p99 * 1000:.0f} ms'}"
        )
    return "; ".join(parts)


@contextmanager
def database(backend: str, tmp: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp / 'soak.db'}"
        return
    url = f"{PG_CONNINFO}?schema={SCHEMA}"
    guard = SchemaGuard(url)
    try:
        yield url
    finally:
        guard.cleanup()


@contextmanager
def rules_runner(url: str) -> Iterator[subprocess.Popen[bytes]]:
    entry = "import sys; from sluice.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", entry, "run", "--db", url], env=child_environment()
    )
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(30)


@dataclass
class Soak:
    backend: str
    maximum: dict[str, float]
    rates: dict[str, float]
    load: Phase


def soak(backend: str, minutes: float, calibrate: float, load: float, width: float) -> Soak:
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp, database(backend, Path(tmp)) as url:
        secret = prepare(url)
        with ExitStack() as stack:
            server = stack.enter_context(sluice_serve(url))
            runner = stack.enter_context(rules_runner(url))
            maximum = {}
            for stream, (_, sources) in STREAMS.items():  # each alone, unpaced
                print(f"{backend}: calibrating {stream} alone, {calibrate:.0f} s", flush=True)
                cal = run_phase(url, server=server, runner=runner, secret=secret,
                                rates={stream: 0.0}, seconds=calibrate,
                                width=calibrate / 6)  # fmt: skip
                consumer = stream if len(sources) == 1 else f"{stream}.{sources[0]}"
                steady = [cal.rate(consumer, "take", w) for w in cal.windows()[1:]]
                maximum[stream] = statistics.mean(steady) if steady else 0.0
                _drain(url)
            if not all(maximum.values()):
                raise RuntimeError(f"a stream took nothing while calibrating: {maximum}")
            # Each stream's share of the machine: load / streams of what it does alone.
            rates = {s: round(load * m / len(STREAMS), 1) for s, m in maximum.items()}
            print(f"{backend}: soaking {minutes:g} min at {rates}", flush=True)
            phase = run_phase(url, server=server, runner=runner, secret=secret, rates=rates,
                              seconds=minutes * 60, width=width)  # fmt: skip
        return Soak(backend, maximum, rates, phase)


def _drain(url: str) -> None:
    """What the unpaced calibration left queued, so the soak starts from empty queues."""
    with sluice.connect(url) as db:
        for queue in ("orders", "s1", "s2", "inbound", "routed", "web"):
            while True:
                with db.transaction() as tx:
                    if not tx.dequeue(queue, limit=1000):
                        break


def _drift(values: list[float]) -> tuple[float, float, float] | None:
    if len(values) < 3:
        return None
    third = max(1, len(values) // 3)
    first, last = statistics.mean(values[:third]), statistics.mean(values[-third:])
    return first, last, (last / first if first else float("inf"))


def render(soaks: list[Soak], args: argparse.Namespace) -> str:
    backends = [s.backend for s in soaks]
    out = ["# Mixed soak: queues, topics, rules and HTTP at half their maximum", ""]
    facts = [*host_facts(), ("Packages", package_versions(["sluice"]))]
    if "postgresql" in backends:
        facts += pg_facts()
    out += ["| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in facts], ""]
    out += [
        f"Each producer commits batches of {BATCH}; consumers take up to {BATCH} per transaction"
        " (HTTP: a lease of 10, each message acknowledged by its token). Durability: sluice's"
        " default (SQLite WAL with synchronous=FULL and group commit; PostgreSQL's durable"
        f" commits). Windows of {args.window:g} s. Calibration: each stream alone, unpaced, for"
        f" {args.calibrate:g} s; the soak: {args.minutes:g} min with all four at once, each at"
        f" {args.load:g} x its maximum / {len(STREAMS)}."
        " All processes on this one 2-core machine with the database.",
        "",
    ]
    for s in soaks:
        out += [f"## {s.backend}", "", "| stream | maximum msgs/s (alone) | soak rate |",
                "|---|---:|---:|"]  # fmt: skip
        out += [f"| {k} | {s.maximum[k]:,.0f} | {s.rates[k]:,.0f} |" for k in STREAMS]
        consumers = _consumers()
        head = "| window | " + " | ".join(f"{c} msgs/s | {c} p99 ms" for c in consumers)
        procs = sorted({p for smp in s.load.samples.values() for p in smp.rss_mb})
        stores = sorted({k for smp in s.load.samples.values() for k in smp.store})
        out += ["", head + " | RSS total MB | " + " | ".join(stores) + " |"]
        out.append("|---:|" + "---:|" * (2 * len(consumers) + 1 + len(stores)))
        for w, smp in sorted(s.load.samples.items()):
            cells = []
            for c in consumers:
                p99 = s.load.p99(c, w)
                cells += [
                    f"{s.load.rate(c, 'take', w):,.0f}",
                    "-" if p99 is None else f"{p99 * 1000:.0f}",
                ]
            cells.append(f"{sum(smp.rss_mb.values()):,.0f}")
            cells += [f"{smp.store.get(k, 0):,.1f}" for k in stores]
            out.append(f"| {w} | " + " | ".join(cells) + " |")
        out += ["", "Drift (mean of the last third of the windows / the first third):", ""]
        out += ["| figure | first third | last third | ratio |", "|---|---:|---:|---:|"]
        windows = sorted(s.load.samples)
        series: dict[str, list[float]] = defaultdict(list)
        for w in windows:
            for c in consumers:
                series[f"{c} msgs/s"].append(s.load.rate(c, "take", w))
                p99 = s.load.p99(c, w)
                if p99 is not None:
                    series[f"{c} p99 ms"].append(p99 * 1000)
            for p in procs:
                series[f"RSS {p} MB"].append(s.load.samples[w].rss_mb.get(p, 0.0))
            for k in stores:
                series[k].append(s.load.samples[w].store.get(k, 0.0))
        for name, values in series.items():
            d = _drift(values)
            if d is not None:
                out.append(f"| {name} | {d[0]:,.1f} | {d[1]:,.1f} | {d[2]:.2f} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench soak-mixed", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--backend", action="append", choices=("sqlite", "postgresql"))
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--calibrate", type=float, default=60.0)
    parser.add_argument("--load", type=float, default=0.5)
    parser.add_argument("--window", type=float, default=60.0)
    add_common_options(parser, quick="a smoke run: 5 s windows, 5 s calibration, 0.2 minutes")
    args = parser.parse_args(argv)
    if args.quick:
        args.minutes, args.calibrate, args.window = 0.2, 5.0, 5.0
    soaks = [
        soak(b, args.minutes, args.calibrate, args.load, args.window)
        for b in args.backend or ["sqlite", "postgresql"]
    ]
    write_report("soak-mixed", render(soaks, args), args.out)
    os._exit(0)  # the actors' reader threads end with the process


if __name__ == "__main__":
    main()
