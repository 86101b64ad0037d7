"""Idle wake-up latency: from an enqueue's commit to a blocked consumer holding the message.

Run: ``python -m bench wakeup``. A consumer process loops ``with db.transaction() as tx:
msgs = tx.dequeue("lat", wait=5.0)`` and notes ``time.time()`` as soon as dequeue returns. A
producer process, after the consumer has finished the previous message and an idle gap of a
random 5-20 ms (so the consumer is blocked in dequeue again), enqueues one message carrying a
sequence number in its own transaction and notes ``time.time()`` just before ``commit()`` and
just after it returns. Both processes are on this machine and read the same clock.

- latency from commit return = consumer's time - producer's time after ``commit()``: the
  target's measure (from the commit of an enqueue, i.e. from when the message is committed,
  to the consumer holding it); can be slightly negative when the consumer wakes before the
  producer has read its COMMIT reply;
- latency from commit start = consumer's time - producer's time before ``commit()``: also
  reported, it adds the commit itself (its WAL flush) to the wake-up.

The first samples are dropped as warm-up. Default URLs: the PostgreSQL one and, for
comparison, a SQLite file in a temporary directory. Writes ``bench/results/wakeup-<date>.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import (
    DEFAULT_SLUICE_URL,
    SchemaGuard,
    add_common_options,
    host_facts,
    is_postgres,
    one_line,
    package_versions,
    pg_conninfo,
    pg_facts,
    summarize,
    write_report,
)

QUEUE = "lat"
SQLITE = "sqlite"  # --url value meaning: a SQLite file in a fresh temporary directory
TARGET_P50_MS = 2.0
TARGET_P99_MS = 10.0


@dataclass
class Run:
    """The samples of one URL (seconds), or why there are none."""

    url: str
    from_start: list[float] = field(default_factory=list)
    from_return: list[float] = field(default_factory=list)
    commit: list[float] = field(default_factory=list)
    lost: int = 0
    error: str = ""


def _consumer(url: str, total: int, ready: Any, stop: Any, conn: Any) -> None:
    """Dequeue until ``total`` messages came (or told to stop); send {seq: time dequeued}."""
    import sluice

    got: dict[int, float] = {}
    error = ""
    try:
        with sluice.connect(url) as db:
            ready.set()
            while len(got) < total and not stop.is_set():
                with db.transaction() as tx:
                    msgs = tx.dequeue(QUEUE, wait=5.0)
                    now = time.time()
                for m in msgs:
                    body = m.body
                    if isinstance(body, dict):
                        got[int(body["seq"])] = now
                if msgs:
                    ready.set()  # the ack is committed: the next gap can start
    except Exception as exc:
        error = one_line(exc)
    conn.send((got, error))
    conn.close()


def _producer(
    url: str, total: int, gap: tuple[float, float], ready: Any, conn: Any, *, seed: int
) -> None:
    """Enqueue ``total`` messages one by one; send {seq: (before commit, after commit)}."""
    import sluice

    rng = random.Random(seed)
    sent: dict[int, tuple[float, float]] = {}
    lost = 0
    error = ""
    try:
        with sluice.connect(url) as db:
            for seq in range(total):
                if not ready.wait(10.0):
                    lost += 1  # the previous message never arrived; go on regardless
                ready.clear()
                time.sleep(rng.uniform(*gap))
                tx = db.begin()
                tx.enqueue(QUEUE, {"seq": seq})
                before = time.time()
                tx.commit()
                sent[seq] = (before, time.time())
    except Exception as exc:
        error = one_line(exc)
    conn.send((sent, lost, error))
    conn.close()


def measure(url: str, n: int, warmup: int, gap: tuple[float, float]) -> Run:
    import sluice

    run = Run(url)
    guard = SchemaGuard(url)
    total = n + warmup
    ctx = multiprocessing.get_context("spawn")
    procs: list[Any] = []
    try:
        with sluice.connect(url) as db:
            with contextlib.suppress(sluice.QueueNotFound):
                db.drop_queue(QUEUE)
            db.create_queue(QUEUE)
            ready, stop = ctx.Event(), ctx.Event()
            c_recv, c_send = ctx.Pipe(duplex=False)
            p_recv, p_send = ctx.Pipe(duplex=False)
            consumer = ctx.Process(target=_consumer, args=(url, total, ready, stop, c_send))
            producer = ctx.Process(
                target=_producer, args=(url, total, gap, ready, p_send), kwargs={"seed": 12345}
            )
            procs = [consumer, producer]
            consumer.start()
            producer.start()
            c_send.close()
            p_send.close()
            deadline = 60.0 + total * (gap[1] + 0.2)
            sent: dict[int, tuple[float, float]] = {}
            got: dict[int, float] = {}
            if p_recv.poll(deadline):
                sent, run.lost, run.error = p_recv.recv()
            stop.set()
            if c_recv.poll(30.0):
                got, c_error = c_recv.recv()
                run.error = run.error or c_error
            for p in procs:
                p.join(10.0)
            db.drop_queue(QUEUE)
    except Exception as exc:
        run.error = one_line(exc)
        return run
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5.0)
        guard.cleanup()
    for seq in range(warmup, total):
        if seq in sent and seq in got:
            before, after = sent[seq]
            run.from_start.append(got[seq] - before)
            run.from_return.append(got[seq] - after)
            run.commit.append(after - before)
        else:
            run.lost += 1
    if not run.from_start and not run.error:
        run.error = "no samples"
    return run


def _ms(stats: dict[str, float], key: str) -> str:
    return f"{stats[key] * 1000:.2f}" if stats else "-"


def render(runs: list[Run], n: int, warmup: int, gap: tuple[float, float]) -> str:
    facts = host_facts()
    if any(is_postgres(r.url) for r in runs):
        facts += pg_facts(next(pg_conninfo(r.url) for r in runs if is_postgres(r.url)))
    facts.append(("Packages", package_versions(("sluice", "psycopg"))))
    lines = [f"# sluice idle wake-up latency, {facts[0][1]}", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in facts]
    lines += [
        "",
        f"One consumer process blocked in `tx.dequeue('{QUEUE}', wait=5.0)`; a producer process"
        f" enqueues one message per transaction after a random {gap[0] * 1000:.0f}-"
        f"{gap[1] * 1000:.0f} ms idle gap that starts once the consumer has committed the"
        f" previous one. {n} samples per URL after {warmup} warm-up messages. Times in ms from"
        " `time.time()` of both processes (same machine). *From commit start*: producer's clock"
        " read just before `commit()` (includes the commit); *from commit return*: just after"
        " it returns. Default durability of each backend.",
        "",
        "| URL | samples | from commit start p50 / p90 / p99 / max | from commit return"
        " p50 / p99 | commit p50 | lost |",
        "|---|---:|---|---|---:|---:|",
    ]
    for r in runs:
        if r.error and not r.from_start:
            lines.append(f"| `{r.url}` | error: {r.error} | - | - | - | - |")
            continue
        s, e, c = summarize(r.from_start), summarize(r.from_return), summarize(r.commit)
        lines.append(
            f"| `{r.url}` | {len(r.from_start)} | {_ms(s, 'p50')} / {_ms(s, 'p90')} /"
            f" {_ms(s, 'p99')} / {_ms(s, 'max')} | {_ms(e, 'p50')} / {_ms(e, 'p99')}"
            f" | {_ms(c, 'p50')} | {r.lost}{f' ({r.error})' if r.error else ''} |"
        )
    lines += [
        "",
        "## Targets (from the commit: commit return to the consumer holding it)",
        "",
        "PostgreSQL pushes news by LISTEN/NOTIFY; SQLite on Linux by an inotify watch of the"
        " database's directory. SQLite elsewhere polls PRAGMA data_version every"
        " poll_interval (50 ms) and has no target.",
        "",
    ]
    for r in runs:
        s = summarize(r.from_return)
        if not is_postgres(r.url) and not sys.platform.startswith("linux"):
            lines.append(f"- (no target) `{r.url}`: polled on {sys.platform}")
            continue
        if not s:
            lines.append(f"- MISS  `{r.url}`: no samples")
            continue
        for key, limit in (("p50", TARGET_P50_MS), ("p99", TARGET_P99_MS)):
            value = s[key] * 1000
            verdict = "PASS" if value <= limit else "MISS"
            lines.append(f"- {verdict}  `{r.url}` {key} {value:.2f} ms (need <= {limit:g} ms)")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench wakeup",
        description="Idle wake-up latency: enqueue commit -> blocked consumer holds it.",
    )
    parser.add_argument(
        "--url",
        action="append",
        help=f"sluice URL (repeatable); '{SQLITE}' = a SQLite file in a temporary directory."
        f" Default: {DEFAULT_SLUICE_URL} and {SQLITE}",
    )
    parser.add_argument("--n", type=int, default=500, help="samples per URL")
    parser.add_argument("--warmup", type=int, default=20, help="messages dropped at the start")
    parser.add_argument(
        "--gap-ms", type=float, nargs=2, default=(5.0, 20.0), metavar=("MIN", "MAX")
    )
    add_common_options(parser, quick="a smoke run: 30 samples per URL after 5")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.warmup = 30, 5
    if args.n < 1 or args.warmup < 0 or not 0 <= args.gap_ms[0] <= args.gap_ms[1]:
        parser.error("--n must be positive, --warmup >= 0, 0 <= --gap-ms MIN <= MAX")
    gap = (args.gap_ms[0] / 1000, args.gap_ms[1] / 1000)
    urls: list[str] = args.url or [DEFAULT_SLUICE_URL, SQLITE]
    runs = []
    for url in urls:
        tmp = tempfile.mkdtemp(prefix="bench-wakeup-") if url == SQLITE else None
        try:
            real = f"sqlite:///{Path(tmp) / 'wakeup.db'}" if tmp else url
            run = measure(real, args.n, args.warmup, gap)
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        s = summarize(run.from_start)
        shown = f"p50 {s['p50'] * 1000:.2f} ms, p99 {s['p99'] * 1000:.2f} ms" if s else run.error
        print(f"{real}: {shown}", file=sys.stderr, flush=True)
        runs.append(run)
    write_report("wakeup", render(runs, args.n, args.warmup, gap), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
