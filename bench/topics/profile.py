"""Where a subscription's consumer spends its time, next to a plain queue's: the pull (its
state read and its write), the claim, the commit.

Run: ``python -m bench topics-profile [--url sqlite|postgresql] [--batch 10] [--subscriptions 1]
[--keep-up]``. A backlog of N messages is published first, then consumers drain it (one
thread per subscription, or per plain queue, sharing one Database) with the backend's
``pull``, ``claim``, ``pull_claim`` (the two sent together: PostgreSQL, a consumer that keeps
up), ``commit`` and the pull's ``subscription_state`` read timed. With
``--keep-up``, one thread publishes one message at a time and takes it from every
subscription (queue) at once, one message per transaction: a consumer that keeps up with its
topic, whose every take finds its window empty and the topic one message ahead. Rounds alternate
topic and queue in fresh databases; the fastest round of each is printed, since on a shared
machine the slow rounds measure the neighbours. Prints, writes nothing.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import PG_CONNINFO, chunks, drop_schema, machine_busy, make_bodies

SCHEMA = "bench_topics_profile"
PARTS = ("pull", "  state read", "claim", "pull_claim", "commit", "whole dequeue + commit")
CPU = ("client CPU", "machine busy CPU")


class _Timers:
    """Seconds and calls per part, summed over the consumer threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)

    def add(self, part: str, seconds: float) -> None:
        with self.lock:
            self.seconds[part] += seconds
            self.calls[part] += 1

    def wrap(self, obj: Any, name: str) -> None:
        inner = getattr(obj, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - t0)

        setattr(obj, name, timed)

    def wrap_state_read(self, backend: Any) -> None:
        inner = backend._read_rows  # the pull's first statement, timed on its own

        def timed(name: str, params: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(name, params)
            finally:
                if name == "subscription_state":
                    self.add("  state read", time.perf_counter() - t0)

        backend._read_rows = timed


def _url(kind: str, tmp: Path, synchronous: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'profile.db'}?synchronous={synchronous}"
    drop_schema(PG_CONNINFO, SCHEMA)
    return f"{PG_CONNINFO}?schema={SCHEMA}"


def _keep_up(db: Any, target: str, names: list[str], n: int, timers: _Timers) -> None:
    """Publish one message, take it from every subscription (queue); n times."""
    for body in make_bodies(n):
        for name in ["t"] if target == "topic" else names:
            db.queue(name).put(body)
        for name in names:
            t0 = time.perf_counter()
            with db.transaction() as tx:
                if len(tx.dequeue(name, limit=1)) != 1:
                    raise RuntimeError(f"{name}: the message just published was not there")
            timers.add("whole dequeue + commit", time.perf_counter() - t0)


def _prepare(url: str, target: str, names: list[str], n: int, *, keep_up: bool) -> None:
    """The topic and its subscriptions (or the queues), and the backlog unless keeping up."""
    import sluice

    with sluice.connect(url) as admin:
        if target == "topic":
            admin.create_topic("t")
            for name in names:
                admin.subscribe("t", name)
        else:
            for name in names:
                admin.create_queue(name)
        if not keep_up:
            for chunk in chunks(make_bodies(n), 10):
                for name in ["t"] if target == "topic" else names:
                    admin.queue(name).put_many(chunk)


def one_round(
    kind: str, target: str, subs: int, *, batch: int, n: int, sync: str, keep_up: bool = False
) -> _Timers:
    import sluice

    tmp = Path(tempfile.mkdtemp(prefix="bench-topics-profile-"))
    try:
        url = _url(kind, tmp, sync)
        names = [f"s{i}" for i in range(subs)]
        _prepare(url, target, names, n, keep_up=keep_up)
        db = sluice.connect(url)
        timers = _Timers()
        backend = db.context.backend
        for name in ("pull", "claim", "pull_claim", "commit"):
            timers.wrap(backend, name)
        timers.wrap_state_read(backend)
        got = dict.fromkeys(names, 0)

        def consume(name: str) -> None:
            while got[name] < n:
                t0 = time.perf_counter()
                with db.transaction() as tx:
                    got[name] += len(tx.dequeue(name, limit=batch, wait=0.2))
                timers.add("whole dequeue + commit", time.perf_counter() - t0)

        threads = [threading.Thread(target=consume, args=(name,)) for name in names]
        began, cpu, busy = time.perf_counter(), time.process_time(), machine_busy()
        if keep_up:
            _keep_up(db, target, names, n, timers)
        else:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        timers.add("wall", time.perf_counter() - began)
        timers.add("client CPU", time.process_time() - cpu)
        timers.add("machine busy CPU", machine_busy() - busy)
        db.close()
        return timers
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if kind != "sqlite":
            drop_schema(PG_CONNINFO, SCHEMA)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench topics-profile", description=__doc__)
    p.add_argument("--url", choices=("sqlite", "postgresql"), default="sqlite")
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--subscriptions", type=int, default=1)
    p.add_argument("--messages", type=int, default=3000, help="per subscription (queue)")
    p.add_argument("--synchronous", default="FULL", help="SQLite only")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--keep-up",
        action="store_true",
        help="publish one message at a time and take it at once from each (batch 1)",
    )
    args = p.parse_args(argv)
    if args.keep_up:
        args.batch = 1
    n = args.messages - args.messages % 10
    best: dict[str, _Timers] = {}
    for _ in range(args.rounds):
        for target in ("topic", "queue"):
            timers = one_round(
                args.url,
                target,
                args.subscriptions,
                batch=args.batch,
                n=n,
                sync=args.synchronous,
                keep_up=args.keep_up,
            )
            if target not in best or timers.seconds["wall"] < best[target].seconds["wall"]:
                best[target] = timers
    deliveries = n * args.subscriptions
    print(
        f"{args.url} ({args.synchronous if args.url == 'sqlite' else 'server default'}),"
        f" {args.subscriptions} consumer(s), batch {args.batch},"
        f"{' keeping up,' if args.keep_up else ''} {deliveries:,} deliveries,"
        f" fastest of {args.rounds} rounds; µs per delivery (summed over threads)"
    )
    print(f"{'part':<26}" + "".join(f"{t:>12}" for t in best))
    for part in ("wall", *PARTS, *CPU):
        cells = "".join(f"{best[t].seconds.get(part, 0.0) / deliveries * 1e6:12.1f}" for t in best)
        print(f"{part:<26}{cells}")
    rate = {t: deliveries / best[t].seconds["wall"] for t in best}
    print(f"{'deliveries/s':<26}" + "".join(f"{rate[t]:12,.0f}" for t in best))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
