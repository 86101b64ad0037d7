"""sluice topics against a plain sluice queue and RabbitMQ's fanout exchange, in one run.

Run: ``python -m bench topics`` (``--quick`` for a smoke run of seconds). On both sluice
backends, a SQLite file (default durability) and PostgreSQL (127.0.0.1:5432, database
``test``, schema ``bench_topics``, dropped after each case), a topic with 1, 10 and 100
subscriptions (all receiving everything, or every second one with a selector that holds for
10% of the messages), each drained by its own consumer, and a plain queue with one consumer;
one message per transaction and batches of 10. RabbitMQ (127.0.0.1:5672): a fanout exchange to
10 durable queues, persistent messages, publisher confirms, manual acks, one consumer per queue.

Each case runs in fresh processes, a publisher and a consumer process (a thread per
subscription), in three phases:

1. publish alone: N messages while no consumer runs: the publish cost;
2. drain: the consumers start and take that backlog: deliveries/s with no publisher;
3. live: N more messages while every consumer runs: the publish cost under load, delivered
   messages/s (all subscriptions together) and the lag, sampled every 0.5 s.

Writes ``bench/results/topics-<date>.md`` (``--quick``: ``topics-quick.md`` in the temp
directory unless ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import (
    PG_CONNINFO,
    add_common_options,
    body_size,
    drop_schema,
    filesystem_of,
    host_facts,
    one_line,
    package_versions,
    pg_conninfo,
    pg_facts,
    rabbit_params,
    rabbit_version,
    url_schema,
    write_report,
)
from bench.topics.clients import (
    EXCHANGE,
    PLAIN,
    QUEUE,
    TOPIC,
    Shared,
    consume_main,
    publish_main,
    queue_names,
)
from bench.topics.report import SELECTOR, Case, Outcome, Publish, Sample, Settings, render

DEFAULT_PG_URL = f"{PG_CONNINFO}?schema=bench_topics"
SUBSCRIPTIONS = (1, 10, 100)
BATCHES = (1, 10)
SAMPLE_EVERY = 0.5
QUIET = 3.0
"""Seconds without a delivery, once the publisher is done, after which what is missing is lost."""

# Deliveries one phase aims at (messages x subscriptions receiving them), per system and batch:
# what the consumers take in 2 to 4 s on this 2-core machine, so that a full run stays near
# 5 minutes. Messages per phase are clamped to MESSAGES[batch].
DELIVERIES: dict[tuple[str, int], int] = {
    ("sqlite", 1): 3_000,
    ("sqlite", 10): 20_000,
    ("postgresql", 1): 3_000,
    ("postgresql", 10): 15_000,
    ("rabbitmq", 1): 8_000,
    ("rabbitmq", 10): 30_000,
}
MESSAGES: dict[int, tuple[int, int]] = {1: (50, 1_000), 10: (50, 3_000)}
QUICK_MESSAGES = 100


def _messages(system: str, batch: int, receivers: float, quick: bool) -> int:
    """Messages per phase: the system's delivery budget over the subscriptions receiving each."""
    if quick:
        return QUICK_MESSAGES
    low, high = MESSAGES[batch]
    n = min(max(int(DELIVERIES[system, batch] / receivers), low), high)
    return n - n % 10  # whole batches in every subscription


def cases(quick: bool, systems: Sequence[str]) -> list[Case]:
    """The matrix, in the order it runs: per batch, SQLite, PostgreSQL, then RabbitMQ."""
    shapes: list[tuple[str, int, str]] = [("queue", 1, "all")]
    for subs in (10,) if quick else SUBSCRIPTIONS:
        shapes.append(("topic", subs, "all"))
        if subs > 1:
            shapes.append(("topic", subs, "half"))
        if subs == 10:  # acknowledged as RabbitMQ's acks are: without waiting for the disk
            shapes.append(("topic", subs, "acks"))
    out: list[Case] = []
    for batch in (10,) if quick else BATCHES:
        for system in systems:
            wanted = [("fanout", 10, "all")] if system == "rabbitmq" else shapes
            for target, subs, mix in wanted:
                receivers = subs / 2 + subs / 20 if mix == "half" else subs
                n = _messages(system, batch, receivers, quick)
                out.append(Case(system, target, subs, mix, batch, n, n))
    return out


# ---------------------------------------------------------------------- set up, tear down


class _Place:
    """Where one case runs: made fresh before it, removed after it."""

    def __init__(self, case: Case, settings: Settings, tmp_root: Path) -> None:
        self.case = case
        self.settings = settings
        self.tmp_root = tmp_root
        self.tmp: Path | None = None
        self.url = ""

    def make(self) -> None:
        case = self.case
        if case.system == "rabbitmq":
            self._make_rabbit()
            return
        import sluice

        if case.system == "sqlite":
            self.tmp = Path(tempfile.mkdtemp(prefix="bench-topics-", dir=self.tmp_root))
            self.url = f"sqlite:///{self.tmp / 'topics.db'}"
        else:
            self.url = self.settings.pg_url
            self._drop_pg()
        db = sluice.connect(self.url)
        try:
            if case.target == "queue":
                db.create_queue(QUEUE)
                return
            db.create_topic(TOPIC)
            db.create_queue(PLAIN)
            for i, name in enumerate(queue_names(case)):
                db.subscribe(
                    TOPIC,
                    name,
                    where=SELECTOR if case.selective(i) else None,
                    durability="transient" if case.mix == "acks" else None,
                )
        finally:
            db.close()

    def _drop_pg(self) -> None:
        schema = url_schema(self.url)
        if schema:
            drop_schema(pg_conninfo(self.url), schema)

    def _make_rabbit(self) -> None:
        import pika

        conn = pika.BlockingConnection(rabbit_params())
        try:
            ch = conn.channel()
            self._delete_rabbit(ch)
            ch.exchange_declare(EXCHANGE, exchange_type="fanout", durable=True)
            for name in queue_names(self.case):
                ch.queue_declare(name, durable=True, arguments={"x-queue-type": "classic"})
                ch.queue_bind(name, EXCHANGE)
        finally:
            conn.close()

    def _delete_rabbit(self, ch: Any) -> None:
        for name in queue_names(self.case):
            ch.queue_delete(name)
        ch.exchange_delete(EXCHANGE)

    def remove(self) -> None:
        if self.case.system == "rabbitmq":
            import pika

            conn = pika.BlockingConnection(rabbit_params())
            try:
                self._delete_rabbit(conn.channel())
            finally:
                conn.close()
        elif self.case.system == "postgresql":
            self._drop_pg()
        elif self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


# ---------------------------------------------------------------------- one case


class _Aborted(Exception):
    """A phase could not finish: a process failed, or the deadline passed."""


class _Run:
    """The processes and shared counters of one case, and its three phases."""

    def __init__(self, case: Case, url: str, settings: Settings) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.case, self.settings = case, settings
        n = len(queue_names(case))
        shared = Shared(
            published=ctx.Value("q", 0, lock=False),
            delivered=ctx.Array("q", n, lock=False),
            last=ctx.Array("d", n, lock=False),
            go=ctx.Event(),
            stop=ctx.Event(),
        )
        self.published, self.delivered, self.last = shared.published, shared.delivered, shared.last
        self.go, self.stop = shared.go, shared.stop
        self.pub, pub_child = ctx.Pipe()
        self.con, con_child = ctx.Pipe()
        self.procs = [
            ctx.Process(
                target=publish_main,
                args=(case, url, pub_child, shared),
                name="bench-topics-publisher",
            ),
            ctx.Process(
                target=consume_main,
                args=(case, url, con_child, shared),
                name="bench-topics-consumers",
            ),
        ]
        for proc in self.procs:
            proc.start()
        pub_child.close()
        con_child.close()

    def _recv(self, pipe: Any, timeout: float) -> tuple[Any, ...]:
        deadline = time.monotonic() + timeout
        while not pipe.poll(0.05):
            if self.stop.is_set():
                raise _Aborted(self._consumer_error() or "stopped")
            if time.monotonic() > deadline:
                raise _Aborted(f"no answer in {timeout:g} s")
        message: tuple[Any, ...] = pipe.recv()
        if message[0] == "error":
            raise _Aborted(message[1])
        return message

    def _consumer_error(self) -> str:
        if self.con.poll(2.0):
            with contextlib.suppress(EOFError):
                kind, errors = self.con.recv()
                if kind == "done" and errors:
                    return str(errors[0])
        return ""

    def _missing(self, published: int) -> list[int]:
        """Per subscription: deliveries of messages 0 .. published - 1 it has yet to make."""
        return [max(self.case.expected(i, published) - d, 0) for i, d in enumerate(self.delivered)]

    def _lag(self, at: float) -> Sample:
        lags = self._missing(self.published.value)
        return Sample(at, self.published.value, max(lags), statistics.fmean(lags))

    def _until_delivered(
        self, total: int, began: float, out: Outcome, publishing: bool
    ) -> Publish | None:
        """Wait until every subscription has what it should of messages 0 .. total - 1,
        sampling the lag while ``publishing``; the publisher's figures if it was publishing.

        Deliveries that stop short (nothing delivered for QUIET seconds once the publisher is
        done) are counted as lost, so that the figures still show and the loss is reported.
        """
        timeout, every = self.settings.deadline, self.settings.sample_every
        done: Publish | None = None
        tick = began + every
        seen, quiet_since = -1, time.monotonic()
        while True:
            now = time.monotonic()
            if publishing and now >= tick:
                out.samples.append(self._lag(now - began))
                tick += every
            if publishing and done is None and self.pub.poll(0):
                (_, done, _) = self._recv(self.pub, 1.0)
            if self.stop.is_set():
                raise _Aborted(self._consumer_error() or "stopped")
            publisher_done = done is not None or not publishing
            missing = self._missing(total)
            if publisher_done and not any(missing):
                break
            count = sum(self.delivered)
            if count != seen:
                seen, quiet_since = count, now
            elif publisher_done and now - quiet_since > QUIET:
                short = [
                    f"{n} {m:,}" for n, m in zip(queue_names(self.case), missing, strict=True) if m
                ]
                out.lost += sum(missing)
                out.notes.append(f"never delivered: {', '.join(short[:5])}"
                                 + (" ..." if len(short) > 5 else ""))  # fmt: skip
                break
            if now - began > timeout:
                raise _Aborted(
                    f"timed out after {timeout:g} s"
                    f"{'' if publisher_done else ' (publisher not done)'}"
                    f" with {sum(missing):,} deliveries to go"
                )
            time.sleep(0.002)
        if publishing:
            out.samples.append(self._lag(time.monotonic() - began))
        return done

    def phases(self, out: Outcome) -> None:
        case = self.case
        self._recv(self.pub, 120.0)  # ready: connected, bodies built
        self._recv(self.con, 120.0)
        # 1. publish alone.
        self.pub.send(("publish", 0, case.alone, True))
        (_, out.alone, out.paired) = self._recv(self.pub, self.settings.deadline)
        # 2. drain the backlog.
        began = time.monotonic()
        self.go.set()
        self._until_delivered(case.alone, began, out, publishing=False)
        out.drain_seconds = max(self.last) - began
        out.drain_deliveries = case.receivers(case.alone) - out.lost
        # 3. live: publish while every consumer runs, sample the lag.
        total = case.alone + case.live
        began = time.monotonic()
        self.pub.send(("publish", case.alone, case.live, False))
        lost_before = out.lost
        out.live = self._until_delivered(total, began, out, publishing=True)
        out.live_seconds = max(self.last) - began
        out.live_deliveries = (
            case.receivers(total) - case.receivers(case.alone) - (out.lost - lost_before)
        )

    def finish(self, out: Outcome) -> None:
        """Stop the consumers and the publisher; check nothing was delivered twice."""
        self.go.set()
        self.stop.set()
        with contextlib.suppress(Exception):
            self.pub.send(("quit",))
        errors = ""
        if not out.error:
            errors = self._consumer_error()
        for proc in self.procs:
            proc.join(30.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(10.0)
                out.notes.append(f"{proc.name} killed after the run")
        total = self.case.alone + self.case.live
        extra = [
            f"{name}: {d - self.case.expected(i, total):+,}"
            for i, (name, d) in enumerate(zip(queue_names(self.case), self.delivered, strict=True))
            if d > self.case.expected(i, total)
        ]
        if not out.error and errors:
            out.error = errors
        if not out.error and extra:
            out.error = f"delivered more than published: {', '.join(extra[:3])}"


def run_case(case: Case, settings: Settings, tmp_root: Path) -> Outcome:
    out = Outcome(case)
    place = _Place(case, settings, tmp_root)
    try:
        place.make()
    except Exception as exc:
        out.error = f"set-up: {one_line(exc)}"
        return out
    run: _Run | None = None
    try:
        run = _Run(case, place.url, settings)
        run.phases(out)
    except _Aborted as exc:
        out.error = str(exc).replace("|", "/")
    except Exception as exc:
        out.error = one_line(exc)
    finally:
        if run is not None:
            run.finish(out)
        try:
            place.remove()
        except Exception as exc:
            out.notes.append(f"clean-up failed: {one_line(exc)}")
    return out


# ---------------------------------------------------------------------- report


def facts(settings: Settings, tmp_root: Path) -> list[tuple[str, str]]:
    from sluice.backends.sqlite_settings import SQLiteSettings

    device, mount, fstype = filesystem_of(tmp_root)
    sync = SQLiteSettings().synchronous
    return [
        *host_facts(),
        ("SQLite library", sqlite3.sqlite_version),
        (
            "SQLite file",
            f"in {tmp_root} on {device} ({fstype}, mounted at {mount}); WAL,"
            f" synchronous={sync} (sluice's default: fsync at every commit; concurrent"
            " commits of one Database share an fsync, group commit)",
        ),
        *pg_facts(pg_conninfo(settings.pg_url)),
        ("RabbitMQ", rabbit_version()),
        ("Packages", package_versions(("sluice", "pika", "psycopg"))),
    ]


def workload(settings: Settings) -> list[str]:
    return [
        "Each case runs in fresh processes on a fresh database (a new SQLite file, a PostgreSQL"
        " schema dropped and made again, new RabbitMQ queues): one publisher process and one"
        " consumer process with a thread per subscription, each thread draining its own"
        " subscription (queue), the same arrangement for sluice and RabbitMQ. Both processes"
        " are Python, so each side is bound by one interpreter lock and the 2 cores are shared"
        " by the publisher, the consumers and the server (PostgreSQL, RabbitMQ; SQLite runs in"
        " the clients' processes). A parent process only sets up, starts the phases and"
        " samples shared counters.",
        "",
        "Phases: (1) *publish alone*: N messages while no consumer runs; µs per message = the"
        " publisher's wall time for its puts and commits / N; p50 / p99 of one transaction "
        "(put + commit, or a batch and all its confirms); into a topic, each transaction "
        "alternates with the same transaction into a plain queue of the same database (never "
        "consumed; who goes first alternates too), whose figures are the next column: the "
        "publish cost ratio is taken over the same seconds of the same disk; (2) *drain*: the"
        " consumers start and take that backlog; deliveries/s = deliveries / time to the last"
        " one; (3) *live*: N more messages while every consumer runs; delivered/s = "
        "deliveries (all subscriptions together) / time from the first publish to the last "
        "delivery; catch-up = how long the consumers needed after the last publish; lag = "
        "published (committed, or confirmed) minus delivered (committed, or acked) per "
        f"subscription, sampled every {settings.sample_every:g} s. After the run, each "
        "subscription must have received exactly what its selector holds for, no more and no "
        "less.",
        "",
        f"Bodies: the ~{body_size()}-byte JSON orders of the cycle benchmark, `n` = the message's"
        f" index. Selector of the selective subscriptions: `{SELECTOR}` (10% of the"
        " messages; sluice's expression language has no `%`).",
        "",
        "- **sluice** (`sluice.connect(url)`, defaults): batch 1: `queue.put(body)` (one"
        " transaction per message); batch 10: `queue.put_many(10 bodies)`; into the topic or"
        " the plain queue. Consumers share one `Database`; each loops `with db.transaction() as"
        " tx: tx.dequeue(subscription, limit=batch, wait=0.25)`, the commit acknowledging"
        " them. Subscriptions are durable, with the default window (1000 messages pulled"
        " ahead). On PostgreSQL the default pool (10 connections) is shared by the consumer"
        " threads.",
        "- **RabbitMQ** (pika): a durable fanout exchange bound to 10 durable classic queues;"
        " the publisher on a `SelectConnection` with publisher confirms publishes a batch of"
        " persistent messages (`delivery_mode=2`) and waits for all its confirms before the"
        " next; each consumer on its own `BlockingConnection`, `basic_qos(prefetch_count="
        "batch)`, one `basic_ack(multiple=True)` per batch. RabbitMQ confirms a persistent"
        " message once it is written and fsynced, fsyncing many messages at once: a confirmed"
        " message survives a crash, as a committed sluice message does. Its acks are not"
        " fsynced before they take effect (after a crash an acked message may come again),"
        " while a sluice consumer's commit waits for its fsync on SQLite (FULL; the commits"
        " of the consumer threads share fsyncs) and for the WAL flush on PostgreSQL (pulls"
        " and claims commit without one): on the consumer side sluice does more durable work"
        " per message.",
        "",
        "Messages per phase (N, published alone and again live), per case: about the same"
        " number of deliveries in every case of one system and batch, so fewer messages for"
        " more subscriptions: "
        + ", ".join(f"{s} batch {b}: {d:,} deliveries" for (s, b), d in DELIVERIES.items())
        + "; N between "
        + ", ".join(f"{lo} and {hi:,} at batch {b}" for b, (lo, hi) in MESSAGES.items())
        + ".",
    ]


def _progress(out: Outcome) -> str:
    c = out.case
    head = f"{c.system:<10} batch {c.batch:>2} {c.label:<40} N={c.alone:>5}"
    if out.error:
        return f"{head} error: {out.error}"
    alone = out.alone.us_per_message if out.alone else 0.0
    return (
        f"{head} publish {alone:7.0f} µs/msg, drain {out.drain_rate or 0:9,.0f}/s,"
        f" live {out.delivered_rate or 0:9,.0f}/s, peak lag {out.peak_lag}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench topics",
        description="sluice topics (1, 10, 100 subscriptions) against a plain queue and"
        " RabbitMQ's fanout to 10 queues, on SQLite and PostgreSQL.",
    )
    add_common_options(
        parser,
        quick="smoke run of a few seconds",
        tmp_dir=None,
        only=("sqlite", "postgresql", "rabbitmq"),
        only_help="run only these systems (repeatable)",
    )
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="sluice URL of PostgreSQL")
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds per phase, most")
    args = parser.parse_args(argv)
    tmp_root: Path = args.tmp_dir or Path(tempfile.gettempdir())
    settings = Settings(
        quick=args.quick,
        sample_every=SAMPLE_EVERY,
        sqlite_url="sqlite:///<fresh file per case>",
        pg_url=args.pg_url,
        deadline=args.deadline,
    )
    systems = [s for s in ("sqlite", "postgresql", "rabbitmq") if not args.only or s in args.only]
    results: list[Outcome] = []
    began = time.monotonic()
    for case in cases(args.quick, systems):
        t0 = time.monotonic()
        results.append(run_case(case, settings, tmp_root))
        print(
            f"{time.monotonic() - t0:5.1f} s {_progress(results[-1])}", file=sys.stderr, flush=True
        )
    print(f"all cases: {time.monotonic() - began:.0f} s", file=sys.stderr)
    report = render(results, facts(settings, tmp_root), settings, workload(settings))
    out = args.out
    if out is None and args.quick:
        out = tmp_root / "topics-quick.md"
    write_report("topics", report, out)
    return 1 if any(o.error for o in results) else 0


if __name__ == "__main__":
    sys.exit(main())
