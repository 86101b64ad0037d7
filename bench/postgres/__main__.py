"""sluice on PostgreSQL side by side with pgqueuer, procrastinate and RabbitMQ: jobs/s.

Run: ``python -m bench postgres``. Every system does the same work for the same time, one after
the other against the same servers (PostgreSQL 127.0.0.1:5432 database ``test`` at its default
durability, RabbitMQ 127.0.0.1:5672): one producer enqueuing batches of 10 in a loop and five
consumers claiming up to 10 at a time and acknowledging them, with a no-op job. This is the
workload of pgqueuer's own ``tools/benchmark.py`` (throughput strategy: 5 dequeue tasks with
batch size 10, 1 enqueue task with batch size 10, fixed duration), the headline comparison.

The rate is what the consumers finished in a measured window that starts after a warm-up, so
that connecting and installing schemas are not counted. Each system runs in a fresh process
(a hung peer is killed after a deadline), in its own schema or queue that it creates and
drops. Writes ``bench/results/postgres-<date>.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import multiprocessing
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine
from typing import Any

from bench.harness import (
    DEFAULT_SLUICE_URL,
    PG_CONNINFO,
    SchemaGuard,
    add_common_options,
    drop_schema,
    encode,
    host_facts,
    make_bodies,
    one_line,
    package_versions,
    pg_facts,
    rabbit_params,
    write_report,
)

QUEUE = "bench"
PGQUEUER_SCHEMA = "pgqueuer_bench"
FLOOR_SCHEMA = "floor_bench"
PROCRASTINATE_SCHEMA = "procrastinate_bench"
RABBIT_QUEUES = {
    "rabbitmq-classic": "sluice_bench_classic",
    "rabbitmq-quorum": "sluice_bench_quorum",
}
TARGET = 2.0  # sluice >= 2 x pgqueuer jobs/s
FLOOR_TARGET = 0.5  # sluice's time per enqueue batch <= 2 x the floor's (issue 24)

DRIVES: dict[str, str] = {
    "sluice": (
        "`sluice.connect(url)`; 1 producer thread looping `with db.transaction() as tx:"
        " tx.enqueue_many('bench', [body] * 10)`; 5 consumer threads looping `with"
        " db.transaction() as tx: msgs = tx.dequeue('bench', limit=10, wait=1.0)` (the commit"
        " acknowledges them). One `Database` shared by the 6 threads unless"
        " `--sluice-per-thread`. On PostgreSQL, by sluice's design, the commits that enqueue or"
        " acknowledge wait for the WAL flush, while the claim made inside `dequeue` commits with"
        " `SET LOCAL synchronous_commit TO off` (a crash that undoes a claim makes the holder's"
        " commit fail, as a lost lease)."
    ),
    "pgqueuer": (
        "as its `tools/benchmark.py` (throughput strategy, psycopg driver): 1 enqueue task"
        " looping `Queries.enqueue(['fetch'] * 10, payloads, [0] * 10)` then `asyncio.sleep(0)`;"
        " 5 `PgQueuer` instances, each on its own autocommit `psycopg.AsyncConnection`, running"
        " `run(batch_size=10)` (continuous mode, LISTEN/NOTIFY) with an `async def` no-op"
        " entrypoint; all in one uvloop event loop. A job counts when its entrypoint has run"
        " (as in the tool's progress bar); pgqueuer then logs completions in buffered batches."
        " Tables in schema `pgqueuer_bench` (connection `search_path`), logged (durable)."
    ),
    "procrastinate": (
        "`App(PsycopgConnector(pool max_size=10))` in schema `procrastinate_bench`; 1 producer"
        " task looping `task.batch_defer_async(*[{'body': ...}] * 10)` (one INSERT of 10 jobs);"
        " 5 workers `app.run_worker_async(concurrency=1, listen_notify=True)` (or, with"
        " `--procrastinate-mode concurrency`, one worker with `concurrency=5`) with an"
        " `async def` no-op task, all in one"
        " uvloop event loop. A worker fetches one job per query (no batch claim). Default"
        " `delete_jobs='never'`: finished jobs stay as `succeeded` rows. A job counts when the"
        " task has run."
    ),
    "rabbitmq-classic": (
        "pika 5 `BlockingConnection` consumers, `basic_qos(prefetch_count=10)`, manual acks: one"
        " `basic_ack(multiple=True)` per 10 deliveries; 1 producer on a `SelectConnection` with"
        " publisher confirms publishing 10 persistent messages (`delivery_mode=2`) and waiting"
        " for all 10 confirms before the next 10. Durable classic queue (`x-queue-type=classic`)"
        " on the default exchange. A message counts when its ack is sent."
    ),
    "rabbitmq-quorum": "as rabbitmq-classic, on a quorum queue (`x-queue-type=quorum`).",
    "floor": (
        "the bare floor, no queue features: a table `floor(id bigserial PRIMARY KEY, body"
        " text)` in schema `floor_bench`, threads as sluice's, each on its own psycopg"
        " connection; 1 producer looping `INSERT INTO floor (body) SELECT unnest(%s::text[])`"
        " (10 bodies); 5 consumers looping `DELETE FROM floor WHERE id IN (SELECT id FROM"
        " floor ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED) RETURNING id, body` (claim and"
        " acknowledgement in one), sleeping 1 ms when they find nothing (no notifications);"
        " each statement in autocommit, its own durable transaction in one round trip."
    ),
}
CONTENDERS = tuple(DRIVES)
_PEER_DISTRIBUTIONS = ("pgqueuer", "procrastinate", "pika", "psycopg", "uvloop", "sluice")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What every contender is asked to do (picklable: it travels to the child process)."""

    seconds: float
    warmup: float
    consumers: int
    batch: int
    sluice_url: str
    sluice_per_thread: bool
    pg_conninfo: str
    procrastinate_mode: str = "workers"


@dataclasses.dataclass
class Outcome:
    """One run of one contender. Counts are over the measured window only."""

    enqueued: int = 0
    consumed: int = 0
    window: float = 0.0
    backlog: int | None = None
    error: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def rate(self) -> float | None:
        return self.consumed / self.window if self.window > 0 and not self.error else None

    @property
    def enqueue_rate(self) -> float | None:
        return self.enqueued / self.window if self.window > 0 and not self.error else None


class _Meter:
    """Per-worker counters; each worker writes only its own slot, the main thread reads all."""

    def __init__(self, consumers: int) -> None:
        self.enqueued = [0]
        self.consumed = [0] * consumers
        self.errors: list[str] = []

    def snapshot(self) -> tuple[int, int, float]:
        return self.enqueued[0], sum(self.consumed), time.monotonic()

    def fail(self, where: str, exc: BaseException) -> None:
        self.errors.append(f"{where}: {one_line(exc)}")


def _window(out: Outcome, start: tuple[int, int, float], end: tuple[int, int, float]) -> None:
    out.enqueued = end[0] - start[0]
    out.consumed = end[1] - start[1]
    out.window = end[2] - start[2]


def _measure_threads(meter: _Meter, s: Settings, stop: threading.Event) -> Outcome:
    """Wait out the warm-up and the window (threads already running), then stop them."""
    out = Outcome()
    if not stop.wait(s.warmup):
        start = meter.snapshot()
        stop.wait(s.seconds)
        _window(out, start, meter.snapshot())
    stop.set()
    return out


async def _measure_async(meter: _Meter, s: Settings) -> Outcome:
    out = Outcome()
    await asyncio.sleep(s.warmup)
    start = meter.snapshot()
    await asyncio.sleep(s.seconds)
    _window(out, start, meter.snapshot())
    return out


def _body() -> str:
    """The same ~100-byte JSON document for every system."""
    return encode(make_bodies(1)[0])


def _join(threads: list[threading.Thread], timeout: float, out: Outcome) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0.0))
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        out.notes.append(f"threads still running after stop: {', '.join(stuck)}")


def _run_threads(
    threads: list[threading.Thread], meter: _Meter, s: Settings, stop: threading.Event
) -> Outcome:
    """Start a contender's producer and consumer threads, measure, stop and join them."""
    for t in threads:
        t.start()
    out = _measure_threads(meter, s, stop)
    _join(threads, 30.0, out)
    out.error = meter.errors[0] if meter.errors else ""
    out.backlog = meter.enqueued[0] - sum(meter.consumed)
    return out


# ------------------------------------------------------------------------------ sluice


def run_sluice(s: Settings) -> Outcome:
    import sluice

    body: dict[str, object] = make_bodies(1)[0]
    guard = SchemaGuard(s.sluice_url)
    stop = threading.Event()
    meter = _Meter(s.consumers)
    dbs: list[sluice.Database] = []
    try:
        dbs.append(sluice.connect(s.sluice_url))
        with contextlib.suppress(sluice.QueueNotFound):
            dbs[0].drop_queue(QUEUE)  # left over from an interrupted run
        dbs[0].create_queue(QUEUE, exist_ok=True)
        if s.sluice_per_thread:
            dbs += [sluice.connect(s.sluice_url) for _ in range(s.consumers + 1)]
        else:
            dbs += [dbs[0]] * (s.consumers + 1)

        def produce(db: sluice.Database) -> None:
            try:
                while not stop.is_set():
                    with db.transaction() as tx:
                        tx.enqueue_many(QUEUE, [body] * s.batch)
                    meter.enqueued[0] += s.batch
            except Exception as exc:
                meter.fail("producer", exc)
                stop.set()

        def consume(db: sluice.Database, slot: int) -> None:
            try:
                while not stop.is_set():
                    with db.transaction() as tx:
                        msgs = tx.dequeue(QUEUE, limit=s.batch, wait=1.0)
                    meter.consumed[slot] += len(msgs)
            except Exception as exc:
                meter.fail(f"consumer {slot}", exc)
                stop.set()

        threads = [threading.Thread(target=produce, args=(dbs[1],), name="producer")]
        threads += [
            threading.Thread(target=consume, args=(dbs[2 + i], i), name=f"consumer-{i}")
            for i in range(s.consumers)
        ]
        out = _run_threads(threads, meter, s, stop)
        dbs[0].drop_queue(QUEUE)
        return out
    finally:
        for db in {id(d): d for d in dbs}.values():
            db.close()
        note = guard.cleanup()
        if note:
            print(note, file=sys.stderr)


# ------------------------------------------------------------------------------ the floor


def run_floor(s: Settings) -> Outcome:
    import psycopg

    bodies = [_body()] * s.batch
    stop = threading.Event()
    meter = _Meter(s.consumers)
    table = f"{FLOOR_SCHEMA}.floor"
    drop_schema(s.pg_conninfo, FLOOR_SCHEMA)
    with psycopg.connect(s.pg_conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {FLOOR_SCHEMA}")
        admin.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, body text NOT NULL)")

    def produce() -> None:
        try:
            # Autocommit: the statement is its transaction, one round trip with its commit.
            with psycopg.connect(s.pg_conninfo, autocommit=True) as conn:
                while not stop.is_set():
                    conn.execute(f"INSERT INTO {table} (body) SELECT unnest(%s::text[])", (bodies,))
                    meter.enqueued[0] += s.batch
        except Exception as exc:
            meter.fail("producer", exc)
            stop.set()

    def consume(slot: int) -> None:
        take = (
            f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} ORDER BY id"
            " LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id, body"
        )
        try:
            with psycopg.connect(s.pg_conninfo, autocommit=True) as conn:
                while not stop.is_set():
                    rows = conn.execute(take, (s.batch,)).fetchall()
                    meter.consumed[slot] += len(rows)
                    if not rows:
                        stop.wait(0.001)
        except Exception as exc:
            meter.fail(f"consumer {slot}", exc)
            stop.set()

    threads = [threading.Thread(target=produce, name="producer")]
    threads += [
        threading.Thread(target=consume, args=(i,), name=f"consumer-{i}")
        for i in range(s.consumers)
    ]
    try:
        return _run_threads(threads, meter, s, stop)
    finally:
        stop.set()
        drop_schema(s.pg_conninfo, FLOOR_SCHEMA)


# ------------------------------------------------------------------------------ pgqueuer


async def _pgqueuer(s: Settings) -> Outcome:
    import psycopg
    from pgqueuer import PgQueuer, PsycopgDriver, Queries
    from pgqueuer.models import Job

    payload = _body().encode()
    meter = _Meter(s.consumers)
    stop = asyncio.Event()

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            s.pg_conninfo, autocommit=True, options=f"-c search_path={PGQUEUER_SCHEMA}"
        )

    async with await psycopg.AsyncConnection.connect(s.pg_conninfo, autocommit=True) as admin:
        await admin.execute(f"DROP SCHEMA IF EXISTS {PGQUEUER_SCHEMA} CASCADE")
        await admin.execute(f"CREATE SCHEMA {PGQUEUER_SCHEMA}")
    conns = [await connect() for _ in range(s.consumers + 1)]
    try:
        await Queries(PsycopgDriver(conns[0])).install()
        producer_q = Queries(PsycopgDriver(conns[0]))
        pgqs = []
        for slot in range(s.consumers):
            q = Queries(PsycopgDriver(conns[1 + slot]))
            pgq = PgQueuer(q.driver, queries=q)

            def handler(slot: int) -> Callable[[Job], Coroutine[Any, Any, None]]:
                async def fetch(job: Job) -> None:
                    meter.consumed[slot] += 1

                return fetch

            pgq.entrypoint("fetch")(handler(slot))
            pgqs.append(pgq)

        async def produce() -> None:
            while not stop.is_set():
                await producer_q.enqueue(["fetch"] * s.batch, [payload] * s.batch, [0] * s.batch)
                meter.enqueued[0] += s.batch
                await asyncio.sleep(0)

        tasks = [asyncio.ensure_future(pgq.run(batch_size=s.batch)) for pgq in pgqs]
        tasks.append(asyncio.ensure_future(produce()))
        out = await _measure_async(meter, s)
        stop.set()
        for pgq in pgqs:
            pgq.shutdown.set()
        _, pending = await asyncio.wait(tasks, timeout=15.0)
        for task in pending:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            out.error = one_line(errors[0])
        if pending:
            out.notes.append(f"{len(pending)} task(s) cancelled after the grace period")
        out.backlog = meter.enqueued[0] - sum(meter.consumed)
        return out
    finally:
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.close()
        async with await psycopg.AsyncConnection.connect(s.pg_conninfo, autocommit=True) as adm:
            await adm.execute(f"DROP SCHEMA IF EXISTS {PGQUEUER_SCHEMA} CASCADE")


def run_pgqueuer(s: Settings) -> Outcome:
    return _run_loop(_pgqueuer(s))


# ------------------------------------------------------------------------------ procrastinate


async def _procrastinate(s: Settings) -> Outcome:
    import procrastinate
    import psycopg

    job: dict[str, Any] = {"body": make_bodies(1)[0]}
    meter = _Meter(1)
    stop = asyncio.Event()
    async with await psycopg.AsyncConnection.connect(s.pg_conninfo, autocommit=True) as admin:
        await admin.execute(f"DROP SCHEMA IF EXISTS {PROCRASTINATE_SCHEMA} CASCADE")
        await admin.execute(f"CREATE SCHEMA {PROCRASTINATE_SCHEMA}")
    connector = procrastinate.PsycopgConnector(
        conninfo=s.pg_conninfo,
        kwargs={"options": f"-c search_path={PROCRASTINATE_SCHEMA}"},
        min_size=2,
        max_size=10,
    )
    app = procrastinate.App(connector=connector)

    @app.task(name="noop", queue=QUEUE)  # type: ignore[untyped-decorator, unused-ignore]
    async def noop(body: dict[str, Any]) -> None:
        meter.consumed[0] += 1

    try:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

            async def produce() -> None:
                while not stop.is_set():
                    await noop.batch_defer_async(*[job] * s.batch)
                    meter.enqueued[0] += s.batch

            one_worker = s.procrastinate_mode == "concurrency"
            workers = [
                asyncio.ensure_future(
                    app.run_worker_async(
                        queues=[QUEUE],
                        name=f"bench-{i}",
                        concurrency=s.consumers if one_worker else 1,
                        wait=True,
                        listen_notify=True,
                        install_signal_handlers=False,
                        shutdown_graceful_timeout=10.0,
                    )
                )
                for i in range(1 if one_worker else s.consumers)
            ]
            producer = asyncio.ensure_future(produce())
            out = await _measure_async(meter, s)
            stop.set()
            await asyncio.wait([producer], timeout=10.0)
            for worker in workers:
                worker.cancel()  # procrastinate turns the cancellation into a graceful stop
            results = await asyncio.gather(producer, *workers, return_exceptions=True)
            errors = [r for r in results if isinstance(r, Exception)]
            if errors:
                out.error = one_line(errors[0])
            out.backlog = meter.enqueued[0] - sum(meter.consumed)
            shape = (
                f"1 worker x concurrency {s.consumers}"
                if one_worker
                else (f"{s.consumers} workers x concurrency 1")
            )
            out.notes.append(shape)
            return out
    finally:
        async with await psycopg.AsyncConnection.connect(s.pg_conninfo, autocommit=True) as adm:
            await adm.execute(f"DROP SCHEMA IF EXISTS {PROCRASTINATE_SCHEMA} CASCADE")


def run_procrastinate(s: Settings) -> Outcome:
    return _run_loop(_procrastinate(s))


def _run_loop(coro: Coroutine[Any, Any, Outcome]) -> Outcome:
    """Run on uvloop (as pgqueuer's own benchmark does), plain asyncio if it is missing."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)  # type: ignore[no-any-return, unused-ignore]


# ------------------------------------------------------------------------------ RabbitMQ


class _RabbitProducer:
    """A SelectConnection publisher that waits for the confirms of each batch before the next.

    pika's BlockingChannel waits for the confirm of every single publish, so confirming per
    batch needs the asynchronous adapter. It runs its I/O loop in its own thread.
    """

    def __init__(
        self, queue: str, body: bytes, batch: int, stop: threading.Event, meter: _Meter
    ) -> None:
        import pika

        self.queue, self.body, self.batch, self.stop, self.meter = queue, body, batch, stop, meter
        self.props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
        self.outstanding: set[int] = set()
        self.sent = 0
        self.channel: Any = None
        self.conn: Any = pika.SelectConnection(
            rabbit_params(),
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
        )
        self.thread = threading.Thread(target=self._run, name="producer")
        self.thread.start()

    def _run(self) -> None:
        try:
            self.conn.ioloop.start()
        except Exception as exc:
            self.meter.fail("producer", exc)
            self.stop.set()

    def _close(self) -> None:
        if not (self.conn.is_closing or self.conn.is_closed):
            self.conn.close()

    def close(self) -> None:
        """Stop from any thread and wait for the I/O loop to end."""
        with contextlib.suppress(Exception):
            self.conn.ioloop.add_callback_threadsafe(self._close)
        self.thread.join(15.0)

    def _on_open(self, conn: Any) -> None:
        conn.channel(on_open_callback=self._on_channel)

    def _on_open_error(self, conn: Any, exc: BaseException) -> None:
        self.meter.fail("producer", exc)
        self.stop.set()
        conn.ioloop.stop()

    def _on_closed(self, conn: Any, reason: BaseException) -> None:
        if not self.stop.is_set():
            self.meter.fail("producer", reason)
            self.stop.set()
        conn.ioloop.stop()

    def _on_channel(self, ch: Any) -> None:
        self.channel = ch
        ch.confirm_delivery(
            ack_nack_callback=self._on_confirm, callback=lambda _frame: self._publish_batch()
        )

    def _publish_batch(self) -> None:
        if self.stop.is_set():
            self._close()
            return
        for _ in range(self.batch):
            self.channel.basic_publish("", self.queue, self.body, self.props)
            self.sent += 1
            self.outstanding.add(self.sent)

    def _on_confirm(self, frame: Any) -> None:
        from pika.spec import Basic

        method = frame.method
        if isinstance(method, Basic.Nack):
            self.meter.fail("producer", RuntimeError(f"broker nacked {method.delivery_tag}"))
            self.stop.set()
        if method.multiple:
            self.outstanding -= {t for t in self.outstanding if t <= method.delivery_tag}
        else:
            self.outstanding.discard(method.delivery_tag)
        if not self.outstanding:
            self.meter.enqueued[0] += self.batch
            self._publish_batch()


def _rabbit_consumer(
    queue: str, batch: int, slot: int, stop: threading.Event, meter: _Meter
) -> None:
    import pika

    try:
        conn = pika.BlockingConnection(rabbit_params())
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=batch)

            def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
                if method.delivery_tag % batch == 0:
                    ch.basic_ack(delivery_tag=method.delivery_tag, multiple=True)
                    meter.consumed[slot] = method.delivery_tag

            ch.basic_consume(queue, on_message, auto_ack=False)
            while not stop.is_set():
                conn.process_data_events(time_limit=0.1)
        finally:
            with contextlib.suppress(Exception):
                conn.close()
    except Exception as exc:
        meter.fail(f"consumer {slot}", exc)
        stop.set()


def _rabbit(s: Settings, kind: str) -> Outcome:
    import pika

    queue = RABBIT_QUEUES[f"rabbitmq-{kind}"]
    admin = pika.BlockingConnection(rabbit_params())
    try:
        ch = admin.channel()
        ch.queue_delete(queue)
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": kind})
        version = admin._impl.server_properties.get("version", b"?")
        stop = threading.Event()
        meter = _Meter(s.consumers)
        consumers = [
            threading.Thread(
                target=_rabbit_consumer,
                args=(queue, s.batch, i, stop, meter),
                name=f"consumer-{i}",
            )
            for i in range(s.consumers)
        ]
        for t in consumers:
            t.start()
        producer = _RabbitProducer(queue, _body().encode(), s.batch, stop, meter)
        out = _measure_threads(meter, s, stop)
        producer.close()
        _join(consumers, 15.0, out)
        out.error = meter.errors[0] if meter.errors else ""
        out.backlog = meter.enqueued[0] - sum(meter.consumed)
        text = version.decode() if isinstance(version, bytes) else str(version)
        out.notes.append(f"RabbitMQ {text}")
        return out
    finally:
        with contextlib.suppress(Exception):
            admin.channel().queue_delete(queue)
        with contextlib.suppress(Exception):
            admin.close()


def run_rabbit_classic(s: Settings) -> Outcome:
    return _rabbit(s, "classic")


def run_rabbit_quorum(s: Settings) -> Outcome:
    return _rabbit(s, "quorum")


RUNNERS: dict[str, Callable[[Settings], Outcome]] = {
    "sluice": run_sluice,
    "pgqueuer": run_pgqueuer,
    "procrastinate": run_procrastinate,
    "rabbitmq-classic": run_rabbit_classic,
    "rabbitmq-quorum": run_rabbit_quorum,
    "floor": run_floor,
}


# ------------------------------------------------------------------------------ orchestration


def _child(name: str, s: Settings, conn: Any) -> None:
    """Entry point of the per-contender process: run, send the Outcome back."""
    try:
        out = RUNNERS[name](s)
    except Exception as exc:
        if os.environ.get("BENCH_TRACEBACK"):
            traceback.print_exc(file=sys.stderr)
        out = Outcome(error=one_line(exc))
    conn.send(out)
    conn.close()


def _checkpoint(conninfo: str) -> None:
    """Start every contender with no dirty pages left by the one before."""
    import psycopg

    with (
        contextlib.suppress(Exception),
        psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn,
    ):
        conn.execute("CHECKPOINT")


def _run_isolated(name: str, s: Settings) -> Outcome:
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(name, s, sender), name=f"bench-{name}")
    proc.start()
    sender.close()
    deadline = s.warmup + s.seconds + 120.0
    out: Outcome | None = None
    try:
        if receiver.poll(deadline):
            out = receiver.recv()
    except EOFError:
        out = None
    proc.join(30.0)
    if proc.is_alive():
        proc.terminate()
        proc.join(10.0)
    if out is None:
        out = Outcome(error=f"no result (exit code {proc.exitcode}, deadline {deadline:.0f} s)")
        _cleanup_after_kill(name, s)
    return out


def _cleanup_after_kill(name: str, s: Settings) -> None:
    """A killed child cannot clean up: drop what it may have left behind."""
    with contextlib.suppress(Exception):
        if name == "pgqueuer":
            drop_schema(s.pg_conninfo, PGQUEUER_SCHEMA)
        elif name == "floor":
            drop_schema(s.pg_conninfo, FLOOR_SCHEMA)
        elif name == "procrastinate":
            drop_schema(s.pg_conninfo, PROCRASTINATE_SCHEMA)
        elif name in RABBIT_QUEUES:
            import pika

            conn = pika.BlockingConnection(rabbit_params())
            conn.channel().queue_delete(RABBIT_QUEUES[name])
            conn.close()


# ------------------------------------------------------------------------------ report


def _median_outcome(runs: list[Outcome]) -> Outcome:
    good = [r for r in runs if r.rate is not None]
    if not good:
        return runs[-1]
    good.sort(key=lambda r: r.rate or 0.0)
    return good[len(good) // 2]


def _fmt(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


def _ratio(sluice: Outcome | None, peer: Outcome) -> str:
    if sluice is None or sluice.rate is None or peer.rate is None or peer.rate == 0:
        return "-"
    return f"{sluice.rate / peer.rate:.2f}"


def render(
    results: dict[str, list[Outcome]],
    s: Settings,
    repeats: int,
    facts: list[tuple[str, str]],
    alone: dict[str, list[Outcome]] | None = None,
) -> str:
    sluice_runs = results.get("sluice")
    sluice = _median_outcome(sluice_runs) if sluice_runs else None
    lines = [f"# sluice on PostgreSQL against pgqueuer, procrastinate and RabbitMQ, {facts[0][1]}"]
    lines += ["", "## Machine and servers", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in facts]
    lines += [
        "",
        "## Workload",
        "",
        f"1 producer enqueuing batches of {s.batch} in a loop; {s.consumers} consumers claiming up"
        f" to {s.batch} at a time and acknowledging them; no-op job; body a ~100-byte JSON"
        f" document. Each system runs alone for a {s.warmup:g} s warm-up and then a measured"
        f" window of {s.seconds:g} s, in a fresh process, after a PostgreSQL CHECKPOINT."
        " jobs/s = jobs finished by the consumers in the window / window length; enqueued/s ="
        " jobs the producer had committed (confirmed, for RabbitMQ) in the window; ms per"
        " enqueue batch = the producer's mean time per batch (one transaction, or one batch of"
        " confirms). backlog ="
        " enqueued but not finished when the producer stopped; bound by = producer when the"
        " backlog is no more than what is in flight (the consumers kept up, so jobs/s is the"
        " single producer's enqueue rate), consumers otherwise. All PostgreSQL systems run"
        " against the server settings shown above (fsync and synchronous_commit on: a commit"
        " waits for its WAL flush unless the system turns that off for a transaction, as said"
        " below); RabbitMQ with durable queues, persistent messages and publisher confirms"
        f" (a confirm is sent once the message is on disk). sluice URL: `{s.sluice_url}`"
        + (" (one Database per thread)." if s.sluice_per_thread else " (one shared Database).")
        + (
            f" {repeats} runs per system, interleaved; the median run is shown."
            if repeats > 1
            else ""
        ),
        "",
        "How each system is driven:",
        "",
    ]
    lines += [f"- **{name}**: {DRIVES[name]}" for name in results]
    lines += [
        "",
        "## Results",
        "",
        "| system | jobs/s | enqueued/s | ms per enqueue batch | backlog at stop | bound by"
        " | sluice / system | notes |",
        "|---|---:|---:|---:|---:|---|---:|---|",
    ]
    for name, runs in results.items():
        out = _median_outcome(runs)
        notes = "; ".join(out.notes)
        if out.error:
            lines.append(f"| {name} | error: {out.error} | - | - | - | - | - | {notes} |")
            continue
        if len(runs) > 1:
            each = ", ".join(_fmt(r.rate) for r in runs)
            notes = f"runs: {each}" + (f"; {notes}" if notes else "")
        ratio = "1.00" if name == "sluice" else _ratio(sluice, out)
        # RabbitMQ counts a batch as enqueued once all its confirms are in, so consumers can be
        # a batch ahead when the producer stops: never show a negative backlog.
        backlog = max(out.backlog or 0, 0)
        # Consumers that kept up leave at most what is in flight: the producer set the pace.
        bound = "producer" if backlog <= 2 * s.consumers * s.batch else "consumers"
        per_batch = f"{s.batch / out.enqueue_rate * 1000:.2f}" if out.enqueue_rate else "-"
        lines.append(
            f"| {name} | {_fmt(out.rate)} | {_fmt(out.enqueue_rate)} | {per_batch} | {backlog:,}"
            f" | {bound} | {ratio} | {notes} |"
        )
    lines += ["", "## Target", ""]
    pgq_runs = results.get("pgqueuer")
    pgq = _median_outcome(pgq_runs) if pgq_runs else None
    label = f"sluice >= {TARGET:g} x pgqueuer jobs/s"
    if sluice is None or sluice.rate is None:
        why = sluice.error if sluice else "not run"
        lines.append(f"- MISS  {label}: sluice has no figure ({why})")
    elif pgq is None or pgq.rate is None:
        lines.append(f"- MISS  {label}: pgqueuer has no figure to compare with")
    else:
        factor = sluice.rate / pgq.rate
        verdict = "PASS" if factor >= TARGET else "MISS"
        lines.append(
            f"- {verdict}  {label}: sluice {sluice.rate:,.0f} / pgqueuer {pgq.rate:,.0f}"
            f" = {factor:.2f} (need {TARGET:g})"
        )
    floor_runs = results.get("floor")
    if sluice_runs and floor_runs:
        lines += _floor_target(sluice_runs, floor_runs, s, "with the consumers running")
    if alone:
        lines += _floor_target(alone["sluice"], alone["floor"], s, "the producer alone")
        for name, runs in alone.items():
            each = ", ".join(
                f"{s.batch / r.enqueue_rate * 1000:.2f}" for r in runs if r.enqueue_rate
            )
            lines.append(f"  - {name} alone, ms per enqueue batch: {each}")
    lines.append("")
    return "\n".join(lines)


def _floor_target(
    sluice_runs: list[Outcome], floor_runs: list[Outcome], s: Settings, how: str
) -> list[str]:
    """Issue 24's target: the producer's time per batch against the floor's, run by run
    (runs are interleaved, so run i of each met the same server state)."""
    ratios = [
        f.enqueue_rate / q.enqueue_rate
        for q, f in zip(sluice_runs, floor_runs, strict=False)
        if q.enqueue_rate and f.enqueue_rate
    ]
    label = (
        f"sluice's enqueue of {s.batch} >= {FLOOR_TARGET:g} x the floor's speed, {how}"
        " (the floor's ms per batch / sluice's)"
    )
    if not ratios:
        return [f"- MISS  {label}: no pair of runs to compare"]
    shown = ", ".join(f"{1 / r:.2f}" for r in ratios)
    worst = 1 / max(ratios)
    verdict = "PASS" if worst >= FLOOR_TARGET else "MISS"
    return [f"- {verdict}  {label}: per run {shown} (worst {worst:.2f})"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench postgres",
        description="sluice on PostgreSQL side by side with pgqueuer, procrastinate and "
        "RabbitMQ (1 producer x batch 10, 5 consumers x batch 10, fixed duration).",
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="measured window per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured start per run")
    add_common_options(
        parser,
        quick="a smoke run: 2 s per system after 0.5 s of warm-up",
        repeats=1,
        repeats_help="runs per system (median)",
        only=CONTENDERS,
        only_help="repeatable",
    )
    parser.add_argument(
        "--sluice-url",
        default=DEFAULT_SLUICE_URL,
        help=f"where sluice runs (default {DEFAULT_SLUICE_URL}); e.g. sqlite:////tmp/b.db",
    )
    parser.add_argument(
        "--sluice-per-thread",
        action="store_true",
        help="give each sluice thread its own sluice.connect() (default: one shared)",
    )
    parser.add_argument(
        "--procrastinate-mode",
        choices=("workers", "concurrency"),
        default="workers",
        help="5 workers of concurrency 1 (default) or 1 worker of concurrency 5",
    )
    parser.add_argument("--pg", default=PG_CONNINFO, help="libpq URL the peers use")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup = 2.0, 0.5
    if args.seconds <= 0 or args.warmup < 0 or args.repeats < 1:
        parser.error("--seconds must be positive, --warmup >= 0, --repeats >= 1")

    s = Settings(
        seconds=args.seconds,
        warmup=args.warmup,
        consumers=5,
        batch=10,
        sluice_url=args.sluice_url,
        sluice_per_thread=args.sluice_per_thread,
        pg_conninfo=args.pg,
        procrastinate_mode=args.procrastinate_mode,
    )
    names = [n for n in CONTENDERS if not args.only or n in args.only]
    facts = host_facts() + pg_facts(s.pg_conninfo)
    facts.append(("Packages", package_versions(_PEER_DISTRIBUTIONS)))
    results: dict[str, list[Outcome]] = {n: [] for n in names}
    for rep in range(args.repeats):
        for name in names:
            _checkpoint(s.pg_conninfo)
            out = _run_isolated(name, s)
            results[name].append(out)
            shown = f"error: {out.error}" if out.error else f"{_fmt(out.rate)} jobs/s"
            print(f"run {rep + 1}/{args.repeats} {name:<17} {shown}", file=sys.stderr, flush=True)
    # The producer alone (no consumers): its enqueue against the floor's, nothing else
    # running on the server.
    alone: dict[str, list[Outcome]] = {}
    if "sluice" in names and "floor" in names:
        solo = dataclasses.replace(s, consumers=0)
        for _ in range(args.repeats):
            for name in ("sluice", "floor"):
                _checkpoint(s.pg_conninfo)
                alone.setdefault(name, []).append(_run_isolated(name, solo))
    write_report("postgres", render(results, s, args.repeats, facts, alone), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
