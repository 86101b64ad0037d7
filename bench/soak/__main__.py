"""Claim latency under a long-running transaction elsewhere in the database.

Run: ``python -m bench soak``. A steady load runs throughout: one producer enqueuing
``--rate`` messages/s in batches of ``--batch`` (paced), and ``--consumers`` consumers each
looping ``with db.transaction() as tx: msgs = tx.dequeue("soak", limit=batch)`` (the commit
acknowledges them); a consumer that finds nothing sleeps ``--idle-ms`` and tries again (or,
with ``--wait``, blocks in dequeue: then the latency includes the wait for work).

Phases: a baseline of ``--baseline`` seconds; then, on a separate connection, a transaction
is opened and left idle for ``--minutes`` (PostgreSQL: ``BEGIN; SELECT txid_current();`` and a
read of a table in another schema, which holds back the xmin horizon of the whole database so
vacuum cannot remove the queue's dead rows; SQLite: a read transaction, which stops WAL
checkpoints from getting past it); then ``--after`` seconds once it has ended.

Per window of ``--window`` seconds: the claim latency (wall time of each ``tx.dequeue`` call
that returned messages) p50/p99/max, the end-to-end latency (enqueue commit start to dequeue
return) p50/p99, the messages consumed per second, the backlog, and what the long transaction
costs the database (PostgreSQL: dead tuples in the queue schema, its size and the xmin age;
SQLite: the WAL file's size). Writes ``bench/results/soak-<date>.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
import threading
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
    make_bodies,
    one_line,
    package_versions,
    pg_conninfo,
    pg_facts,
    summarize,
    url_schema,
    write_report,
)

QUEUE = "soak"
OTHER_SCHEMA = "sluice_soak_other"  # where the long transaction's table lives (PostgreSQL)


@dataclass
class Window:
    """What happened in one window of the run."""

    phase: str
    start: float  # seconds since the load started
    claims: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    consumed: int = 0
    backlog: str = "-"
    cost: str = "-"


@dataclass
class Load:
    """The producer and consumer threads and what they recorded (monotonic seconds)."""

    claims: list[tuple[float, float, int]] = field(default_factory=list)  # (at, took, n)
    e2e: list[tuple[float, float]] = field(default_factory=list)  # (at, seconds)
    enqueued: int = 0
    behind: float = 0.0  # worst lag of the producer behind its schedule, seconds
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _producer(db: Any, load: Load, rate: float, batch: int) -> None:
    body = make_bodies(1)[0]
    interval = batch / rate
    due = time.monotonic()
    try:
        while not load.stop.is_set():
            with db.transaction() as tx:
                tx.enqueue_many(QUEUE, [{**body, "t": time.time()}] * batch)
            load.enqueued += batch
            due += interval
            lag = time.monotonic() - due
            load.behind = max(load.behind, lag)
            if lag < 0:
                load.stop.wait(-lag)
    except Exception as exc:
        load.errors.append(f"producer: {one_line(exc)}")
        load.stop.set()


def _consumer(db: Any, load: Load, batch: int, wait: float, idle: float) -> None:
    try:
        while not load.stop.is_set():
            with db.transaction() as tx:
                begin = time.perf_counter()
                msgs = tx.dequeue(QUEUE, limit=batch, wait=wait)
                took = time.perf_counter() - begin
                now_wall, now = time.time(), time.monotonic()
            if not msgs:
                if not wait:
                    load.stop.wait(idle)
                continue
            e2e = [(now, now_wall - float(m.body["t"])) for m in msgs if isinstance(m.body, dict)]
            with load.lock:
                load.claims.append((now, took, len(msgs)))
                load.e2e.extend(e2e)
    except Exception as exc:
        load.errors.append(f"consumer: {one_line(exc)}")
        load.stop.set()


class Holder:
    """The long transaction on a separate connection, and what it costs the database."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pg = is_postgres(url)
        self.conn: Any = None
        self.pid = 0
        self.xid = ""
        self.note = ""

    def setup(self) -> None:
        if self.pg:
            import psycopg

            with psycopg.connect(pg_conninfo(self.url), autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {OTHER_SCHEMA} CASCADE")
                conn.execute(f"CREATE SCHEMA {OTHER_SCHEMA}")
                conn.execute(f"CREATE TABLE {OTHER_SCHEMA}.other (id int PRIMARY KEY, v text)")
                conn.execute(f"INSERT INTO {OTHER_SCHEMA}.other VALUES (1, 'x')")
                row = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
                self.note = f"idle_in_transaction_session_timeout={row[0] if row else '?'}"

    def open(self) -> None:
        if self.pg:
            import psycopg

            self.conn = psycopg.connect(pg_conninfo(self.url))  # not autocommit: BEGIN implied
            row = self.conn.execute("SELECT txid_current(), pg_backend_pid()").fetchone()
            self.xid, self.pid = str(row[0]), int(row[1])
            self.conn.execute(f"SELECT count(*) FROM {OTHER_SCHEMA}.other").fetchone()
        else:
            self.conn = sqlite3.connect(self._sqlite_path(), isolation_level=None)
            self.conn.execute("BEGIN")
            self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()

    def close(self) -> str:
        """End the long transaction; returns a note if it had died meanwhile."""
        if self.conn is None:
            return ""
        note = ""
        try:
            if self.pg:
                self.conn.rollback()
            else:
                self.conn.execute("ROLLBACK")
        except Exception as exc:
            note = f"long transaction had ended by itself: {one_line(exc)}"
        with contextlib.suppress(Exception):
            self.conn.close()
        self.conn = None
        return note

    def teardown(self) -> None:
        self.close()
        if self.pg:
            import psycopg

            with (
                contextlib.suppress(Exception),
                psycopg.connect(pg_conninfo(self.url), autocommit=True) as conn,
            ):
                conn.execute(f"DROP SCHEMA IF EXISTS {OTHER_SCHEMA} CASCADE")

    def _sqlite_path(self) -> str:
        return self.url.split(":///", 1)[1] if "://" in self.url else self.url

    def cost(self) -> str:
        """Dead tuples, size and xmin age (PostgreSQL) or the WAL's size (SQLite), now."""
        try:
            if not self.pg:
                wal = Path(self._sqlite_path() + "-wal")
                return f"WAL {wal.stat().st_size / 2**20:,.1f} MiB" if wal.exists() else "no WAL"
            import psycopg

            schema = url_schema(self.url) or "sluice"
            with psycopg.connect(pg_conninfo(self.url), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(n_live_tup), 0),"
                    " coalesce(sum(pg_total_relation_size(relid)), 0)"
                    " FROM pg_stat_user_tables WHERE schemaname = %s",
                    (schema,),
                ).fetchone()
                dead, live, size = row if row else (0, 0, 0)
                age_row = conn.execute(
                    "SELECT max(age(backend_xmin)) FROM pg_stat_activity"
                    " WHERE datname = current_database()"
                ).fetchone()
                age = age_row[0] if age_row and age_row[0] is not None else 0
            return (
                f"{dead:,} dead / {live:,} live tuples, {size / 2**20:,.1f} MiB, xmin age {age:,}"
            )
        except Exception as exc:
            return f"? ({one_line(exc)})"


def _bucket(load: Load, windows: list[Window], t0: float, width: float) -> None:
    for at, took, n in load.claims:
        i = int((at - t0) // width)
        if 0 <= i < len(windows):
            windows[i].claims.append(took)
            windows[i].consumed += n
    for at, seconds in load.e2e:
        i = int((at - t0) // width)
        if 0 <= i < len(windows):
            windows[i].e2e.append(seconds)


def _plan(args: argparse.Namespace) -> list[Window]:
    """The windows of the three phases, in order."""
    phases = [
        ("baseline", args.baseline),
        ("long tx open", args.minutes * 60),
        ("after", args.after),
    ]
    windows: list[Window] = []
    for phase, length in phases:
        count = max(round(length / args.window), 1) if length > 0 else 0
        windows += [Window(phase, (len(windows) + k) * args.window) for k in range(count)]
    return windows


def _threads(db: Any, load: Load, args: argparse.Namespace) -> list[threading.Thread]:
    threads = [threading.Thread(target=_producer, args=(db, load, args.rate, args.batch))]
    threads += [
        threading.Thread(
            target=_consumer, args=(db, load, args.batch, args.wait, args.idle_ms / 1000)
        )
        for _ in range(args.consumers)
    ]
    return threads


def _drive(
    db: Any, load: Load, holder: Holder, windows: list[Window], *, width: float, notes: list[str]
) -> float:
    """Walk the windows: open and end the long transaction, sample at each window's end."""
    t0 = time.monotonic()
    seen = 0
    for i, w in enumerate(windows):
        if w.phase == "long tx open" and holder.conn is None:
            holder.open()
            notes.append(f"long transaction opened at {time.monotonic() - t0:.0f} s")
        if w.phase == "after" and holder.conn is not None:
            note = holder.close()
            notes.append(note or f"long transaction ended at {time.monotonic() - t0:.0f} s")
        if load.stop.wait(max(t0 + (i + 1) * width - time.monotonic(), 0.0)):
            break
        w.backlog = f"{db.queue(QUEUE).stats().get('ready', 0):,}"
        w.cost = holder.cost()
        with load.lock:
            recent = [took for _, took, _ in load.claims[seen:]]
            seen = len(load.claims)
        c = summarize(recent)
        print(
            f"[{w.start:>5.0f} s] {w.phase:<13} claims {len(recent):,} p50 {_ms(c, 'p50')}"
            f" p99 {_ms(c, 'p99')} ms, backlog {w.backlog}, {w.cost}",
            file=sys.stderr,
            flush=True,
        )
    return t0


def run(args: argparse.Namespace) -> tuple[list[Window], Load, list[str]]:
    import sluice

    notes: list[str] = []
    guard = SchemaGuard(args.url)
    holder = Holder(args.url)
    load = Load()
    windows = _plan(args)
    db = sluice.connect(args.url)
    try:
        holder.setup()
        if holder.note:
            notes.append(holder.note)
        with contextlib.suppress(sluice.QueueNotFound):
            db.drop_queue(QUEUE)
        db.create_queue(QUEUE)
        threads = _threads(db, load, args)
        for t in threads:
            t.start()
        t0 = _drive(db, load, holder, windows, width=args.window, notes=notes)
        load.stop.set()
        for t in threads:
            t.join(30.0)
        _bucket(load, windows, t0, args.window)
        db.drop_queue(QUEUE)
    finally:
        load.stop.set()
        note = holder.close()
        holder.teardown()
        db.close()
        notes += [n for n in (note, guard.cleanup()) if n]
    notes += load.errors
    if load.behind > 1.0:
        notes.append(f"the producer fell up to {load.behind:.1f} s behind its schedule")
    return windows, load, notes


def _ms(stats: dict[str, float], key: str) -> str:
    return f"{stats[key] * 1000:,.1f}" if stats else "-"


def render(args: argparse.Namespace, windows: list[Window], load: Load, notes: list[str]) -> str:
    facts = host_facts()
    if is_postgres(args.url):
        facts += pg_facts(pg_conninfo(args.url))
    else:
        facts.append(("SQLite library", sqlite3.sqlite_version))
    facts.append(("Packages", package_versions(("sluice", "psycopg"))))
    lines = [f"# sluice claim latency under a long-running transaction, {facts[0][1]}", ""]
    lines += ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in facts]
    how = (
        f"blocks in `tx.dequeue(limit={args.batch}, wait={args.wait:g})` (latency includes the"
        " wait for work)"
        if args.wait
        else f"calls `tx.dequeue(limit={args.batch})` and sleeps {args.idle_ms:g} ms when it"
        " finds nothing"
    )
    holder = (
        f"a separate psycopg connection ran `BEGIN; SELECT txid_current();` and a read of"
        f" `{OTHER_SCHEMA}.other`, then stayed idle in transaction"
        if is_postgres(args.url)
        else "a separate sqlite3 connection ran `BEGIN; SELECT count(*) FROM sqlite_master`"
        " and stayed idle (a read snapshot that WAL checkpoints cannot pass)"
    )
    lines += [
        "",
        f"URL `{args.url}`. Load: 1 producer enqueuing {args.rate:g} messages/s in paced batches"
        f" of {args.batch} (`tx.enqueue_many`); {args.consumers} consumers, each a loop that"
        f" {how}, then commits (the acknowledgement). One shared `Database`. Phases:"
        f" {args.baseline:g} s baseline, {args.minutes:g} min with the long transaction open"
        f" ({holder}), {args.after:g} s after it ended. Claim = wall time of a `tx.dequeue` call"
        " that returned messages; end-to-end = from the producer's clock before its commit to"
        " the consumer's after dequeue. Backlog and database cost sampled at each window's end.",
        "",
        "| window | phase | claims | claim p50 / p99 / max ms | end-to-end p50 / p99 ms"
        " | consumed/s | backlog | database |",
        "|---|---|---:|---|---|---:|---:|---|",
    ]
    for w in windows:
        c, e = summarize(w.claims), summarize(w.e2e)
        lines.append(
            f"| {w.start:.0f}-{w.start + args.window:.0f} s | {w.phase} | {len(w.claims):,}"
            f" | {_ms(c, 'p50')} / {_ms(c, 'p99')} / {_ms(c, 'max')}"
            f" | {_ms(e, 'p50')} / {_ms(e, 'p99')} | {w.consumed / args.window:,.0f}"
            f" | {w.backlog} | {w.cost} |"
        )
    base = summarize([x for w in windows if w.phase == "baseline" for x in w.claims])
    held = [w for w in windows if w.phase == "long tx open" and w.claims]
    lines += ["", "## Summary", ""]
    if base and held:
        last = summarize(held[-1].claims)
        lines.append(
            f"- claim p99: baseline {base['p99'] * 1000:,.1f} ms, last window with the long"
            f" transaction open {last['p99'] * 1000:,.1f} ms"
            f" (x{last['p99'] / base['p99']:.1f}); p50 {base['p50'] * 1000:,.1f} ->"
            f" {last['p50'] * 1000:,.1f} ms"
        )
    lines.append(f"- messages enqueued: {load.enqueued:,}")
    lines += [f"- {n}" for n in notes]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench soak",
        description="Claim latency of sluice under a long-running transaction elsewhere.",
    )
    parser.add_argument("--url", default=DEFAULT_SLUICE_URL, help="sluice URL")
    parser.add_argument("--minutes", type=float, default=10.0, help="long transaction open")
    parser.add_argument("--baseline", type=float, default=30.0, help="seconds before it opens")
    parser.add_argument("--after", type=float, default=30.0, help="seconds after it ends")
    parser.add_argument("--window", type=float, default=30.0, help="seconds per report row")
    parser.add_argument("--rate", type=float, default=500.0, help="messages/s enqueued")
    parser.add_argument("--batch", type=int, default=10, help="messages per enqueue/dequeue")
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--wait", type=float, default=0.0, help="dequeue wait (0: poll)")
    parser.add_argument("--idle-ms", type=float, default=5.0, help="sleep after an empty poll")
    add_common_options(parser, quick="a smoke run: 3 s windows, the transaction open 6 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.minutes, args.baseline, args.after, args.window = 0.1, 3.0, 3.0, 3.0
    if min(args.window, args.rate, args.batch, args.consumers) <= 0 or args.minutes <= 0:
        parser.error("--window, --rate, --batch, --consumers and --minutes must be positive")
    windows, load, notes = run(args)
    write_report("soak", render(args, windows, load, notes), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
