"""Isolation levels and ordered groups: consumer throughput against ``none``.

Run: ``python -m bench isolation`` (``--quick`` for a smoke run). Per backend (a SQLite
file in the temp directory, WAL at the default durability FULL; PostgreSQL at
127.0.0.1:5432 with fsync and synchronous_commit on, in schemas ``bench_iso_*`` dropped
at the end):

1. Drain runs: 8 writers (8 sessions) each commit blocks (transactions) of 10 messages,
   ``--messages`` in all, preloaded; then 4 consumer processes drain the queue, each
   transaction ``dequeue(limit=1)`` then commit (blockwise levels and a ``none`` reference
   ``limit=10``, a block). Levels: none, ordered, blockwise,
   ordered_blockwise, and groups (1,000 distinct groups, round robin, on a none queue).
2. Scale runs: a queue of ``--large`` messages, one group each (a million distinct
   groups), against the same number without groups; the 4 consumers take
   ``--take`` messages, then stop.

Throughput is messages committed per second from the consumers' start to the last one's
finish. Writes ``bench/results/isolation-<date>.md`` (``--quick``: the temp directory).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

import sluice
from bench.harness import add_common_options, machine_facts, pg_facts, report_path
from bench.isolation.peers import rabbit_drain

PG_BASE = "postgresql://127.0.0.1:5432/test"
WRITERS = 8
BLOCK = 10
CONSUMERS = 4
GROUPS = 1000


@dataclass
class Run:
    backend: str
    name: str
    messages: int
    taken: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.taken / self.seconds


def consume(url: str, limit: int, stop_at: int, sync: tuple[Any, Any, Any]) -> None:
    """A consumer process: transactions of ``limit`` messages until the count is reached.

    ``sync``: the shared count, the start event, and the queue finish times go to.
    """
    counter, start, finished = sync
    with sluice.connect(url) as db:
        start.wait()
        while counter.value < stop_at:
            tx = db.begin()
            got = tx.dequeue("q", limit=limit, wait=0.05)
            if not got:
                tx.abort()
                continue
            while True:
                try:
                    tx.commit()
                    break
                except sluice.IncompleteBlock:
                    got += tx.dequeue("q", limit=BLOCK)
            with counter.get_lock():
                counter.value += len(got)
        finished.put(time.perf_counter())


def preload(url: str, isolation: str, total: int, group: Callable[[int], str | None]) -> None:
    writers = [sluice.connect(url) for _ in range(WRITERS)]
    try:
        writers[0].create_queue("q", isolation=isolation)  # type: ignore[arg-type]
        n = 0
        block = 0
        while n < total:
            with writers[block % WRITERS].transaction() as tx:
                for _ in range(BLOCK):
                    tx.enqueue("q", {"n": n, "pad": "x" * 64}, group=group(n))
                    n += 1
            block += 1
    finally:
        for w in writers:
            w.close()


def preload_large(url: str, total: int, grouped: bool) -> None:
    with sluice.connect(url) as db:
        db.create_queue("q")
        for start in range(0, total, 10_000):
            with db.transaction() as tx:
                for n in range(start, min(start + 10_000, total)):
                    tx.enqueue("q", {"n": n, "pad": "x" * 64}, group=f"g{n}" if grouped else None)


def enqueue_rate(url: str, messages: int, group: Callable[[int], str | None]) -> float:
    """Messages/s one producer enqueues, in transactions of 100, each with its group."""
    with sluice.connect(url) as db:
        db.create_queue("q")
        t0 = time.perf_counter()
        for start in range(0, messages, 100):
            with db.transaction() as tx:
                for n in range(start, min(start + 100, messages)):
                    tx.enqueue("q", {"n": n, "pad": "x" * 64}, group=group(n))
        return messages / (time.perf_counter() - t0)


def drain(url: str, take: int, limit: int = 1) -> float:
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    start = ctx.Event()
    finished: Any = ctx.Queue()
    procs = [
        ctx.Process(target=consume, args=(url, limit, take, (counter, start, finished)))
        for _ in range(CONSUMERS)
    ]
    for p in procs:
        p.start()
    time.sleep(2.0)  # the consumers connect (imports, sessions) before the clock starts
    t0 = time.perf_counter()
    start.set()
    ends = [finished.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    return float(max(ends)) - t0


class Backend:
    def __init__(self, name: str, tmp: Path) -> None:
        self.name = name
        self.tmp = tmp
        self.schemas: list[str] = []

    def fresh_url(self, label: str) -> str:
        if self.name == "sqlite":
            return f"sqlite:///{self.tmp / f'{label}.db'}"
        schema = f"bench_iso_{label}"
        self.drop(schema)
        self.schemas.append(schema)
        return f"{PG_BASE}?schema={schema}"

    def drop(self, schema: str) -> None:
        with psycopg.connect(PG_BASE, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def close(self) -> None:
        for schema in self.schemas:
            self.drop(schema)


def run_backend(name: str, messages: int, large: int, take: int, tmp: Path) -> list[Run]:
    backend = Backend(name, tmp)
    runs: list[Run] = []
    try:
        levels: list[tuple[str, str, Callable[[int], str | None]]] = [
            ("none", "none", lambda n: None),
            ("none, batch 10", "none", lambda n: None),
            ("ordered", "ordered", lambda n: None),
            ("blockwise", "blockwise", lambda n: None),
            ("ordered_blockwise", "ordered_blockwise", lambda n: None),
            (f"groups ({GROUPS:,} groups)", "none", lambda n: f"g{n % GROUPS}"),
        ]
        for label, isolation, group in levels:
            url = backend.fresh_url(re.sub(r"\W+", "_", label).strip("_"))
            preload(url, isolation, messages, group)
            # Blockwise readers take a block's worth: a dequeue stops at a block boundary.
            limit = BLOCK if "batch" in label or "blockwise" in label else 1
            runs.append(Run(name, label, messages, messages, drain(url, messages, limit)))
            print(f"{name:10} {label:28} {runs[-1].rate:9.0f} msgs/s", flush=True)
        for label, group in (
            ("enqueue, no groups", lambda n: None),
            ("enqueue, 100 groups", lambda n: f"g{n % 100}"),
            ("enqueue, a group per message", lambda n: f"g{n}"),
        ):
            url = backend.fresh_url(re.sub(r"\W+", "_", label).strip("_"))
            rate = enqueue_rate(url, messages, group)
            runs.append(Run(name, label, messages, messages, messages / rate))
            print(f"{name:10} {label:28} {rate:9.0f} msgs/s", flush=True)
        for label, grouped in (("none, large queue", False), ("groups, one per message", True)):
            url = backend.fresh_url("large_g" if grouped else "large")
            preload_large(url, large, grouped)
            runs.append(Run(name, label, large, take, drain(url, take)))
            print(f"{name:10} {label:28} {runs[-1].rate:9.0f} msgs/s", flush=True)
    finally:
        backend.close()
    return runs


def render(runs: list[Run], facts: list[tuple[str, str]], args: argparse.Namespace) -> str:
    lines = [f"# sluice isolation levels and groups, {time.strftime('%Y-%m-%d %H:%M UTC')}", ""]
    lines += ["## Machine", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in facts]
    lines += [
        "",
        "## Workload",
        "",
        f"{WRITERS} writers (sessions) commit blocks of {BLOCK} messages (~90-byte JSON), "
        f"{args.messages:,} in all, preloaded. {CONSUMERS} consumer processes, each "
        "transaction `dequeue(limit=1)` and commit (batch size 1); `none, batch 10` and "
        "the blockwise levels `dequeue(limit=10)` (a blockwise dequeue stops at a block "
        "boundary, so it takes one whole block; a commit refused mid-block, "
        "`IncompleteBlock`, would take the rest and commit again). Durability: SQLite WAL, "
        "synchronous=FULL (the default); PostgreSQL fsync=on, synchronous_commit=on. "
        f"Large runs: {args.large:,} messages preloaded, one distinct group each (or none), "
        f"{args.take:,} taken. Rate: messages committed per second, consumers' start to the "
        "last one's finish. Enqueue rows: one producer, transactions of 100 messages, "
        f"{args.messages:,} in all, each message with its group. "
        "Target (issue 5): ordered and groups at least 0.5 of none.",
        "",
    ]
    for backend in dict.fromkeys(r.backend for r in runs if r.backend != "RabbitMQ"):
        mine = [r for r in runs if r.backend == backend]
        base = {r.name: r for r in mine}
        lines += [
            f"## {backend}",
            "",
            "| workload | msgs/s | reference | ratio |",
            "|---|---:|---|---:|",
        ]
        for r in mine:
            ref = (
                base["enqueue, no groups"]
                if r.name.startswith("enqueue")
                else base["none, large queue"]
                if r.messages == args.large
                else base["none, batch 10"]
                if "blockwise" in r.name  # their transactions hold whole blocks of 10
                else base["none"]
            )
            ratio = r.rate / ref.rate
            lines.append(f"| {r.name} | {r.rate:,.0f} | {ref.name} | {ratio:.2f} |")
        lines.append("")
    peers = [r for r in runs if r.backend == "RabbitMQ"]
    if peers:
        lines += [
            "## Peer: RabbitMQ",
            "",
            "The same drain on RabbitMQ (localhost, a durable classic queue, persistent "
            "messages preloaded with publisher confirms; 4 consumer processes through pika "
            "with `prefetch_count=1`, one ack per message). `single active consumer` "
            "(`x-single-active-consumer`) is RabbitMQ's way to keep order across "
            "consumers: one consumer at a time takes the whole queue, so it is the nearest "
            "thing to one sluice group; it has no per-group ownership within a queue.",
            "",
            "| workload | msgs/s |",
            "|---|---:|",
        ]
        lines += [f"| {r.name} | {r.rate:,.0f} |" for r in peers]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench isolation",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--take", type=int, default=20_000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    add_common_options(parser, quick="a smoke run of a few seconds")
    args = parser.parse_args(argv)
    if args.quick:
        # the smaller of the quick run's sizes and any given
        args.messages, args.large = min(args.messages, 1000), min(args.large, 5000)
        args.take = min(args.take, 1000)
    with tempfile.TemporaryDirectory(prefix="sluice-iso-") as tmp:
        runs: list[Run] = []
        for name in args.backends.split(","):
            runs += run_backend(name, args.messages, args.large, args.take, Path(tmp))
        for label, single in (("none", False), ("single active consumer", True)):
            seconds = rabbit_drain(args.messages, CONSUMERS, single_active=single)
            if seconds is not None:
                runs.append(Run("RabbitMQ", label, args.messages, args.messages, seconds))
                print(f"RabbitMQ   {label:28} {runs[-1].rate:9.0f} msgs/s", flush=True)
        facts = machine_facts(Path(tmp), ("sluice",))
        if "postgresql" in args.backends:
            facts += pg_facts()
        text = render(runs, facts, args)
    out = args.out or (
        Path(tempfile.gettempdir()) / "isolation-quick.md"
        if args.quick
        else report_path("isolation", None)
    )
    out.write_text(text + "\n")
    print(text)
    print(f"written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
