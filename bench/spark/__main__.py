"""sluice on Spark: reading a queue into a DataFrame, and pipelines queue -> Spark SQL -> queue.

Run: ``python -m bench spark`` (``--quick`` for a smoke run). One Spark session on ``local[2]``
for the whole run, with the PostgreSQL JDBC driver (``/usr/share/java/postgresql.jar``, Debian's
``libpostgresql-jdbc-java``) on its class path. Bodies are ~1 KB JSON orders.

1. Reading into a DataFrame, PostgreSQL (schema ``bench_spark`` at 127.0.0.1:5432, dropped
   at the end): N messages (500,000) of a fresh topic, with subscriptions made before the fill,
   are read by
   a. Spark's own JDBC source over sluice's messages table (``partitionColumn`` id, 2
      partitions, ``fetchsize`` 10,000): the peer, which does not change the rows;
   b. a sluice batch read (browse, 2 partitions);
   c. a sluice streaming read of each subscription (``trigger(availableNow=True)``), by
      position: the topic's rows by id range, acknowledged by moving the pointer;
   then fresh queues of N messages are consumed by a sluice streaming read with
   ``exclusive=true`` (by position; acknowledged by deleting the range) and without it (by
   claimed rounds), ``partitions`` 1 and 2. Every query writes to ``format("noop")``.
   Targets: streaming read (by position) and batch read >= 0.5 x JDBC. Unless ``--no-bounds``,
   the claimed rounds' statements and their DELETE also run alone, without Spark.
2. End-to-end pipeline ``run_pipeline(... sql={"billing": ...})`` from ``orders`` to
   ``billing`` on SQLite (a file on disk) and on PostgreSQL: N messages (100,000), two
   ``max_per_batch`` values; afterwards billing must hold N messages and orders none. Target:
   >= 10,000 msgs/s. Per query, the time is split by the phases of Spark's progress reports.

A warm-up of every query on a small queue runs first; then the readers of part 1 run
untimed at full size until they are steady (the JVM compiles a row path only after many
rows). Writes ``bench/results/spark-<date>.md`` (``--quick``: ``spark-quick.md`` in the temp
directory unless ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import sluice
from bench.harness import (
    MEMORY_FS,
    PG_CONNINFO,
    SchemaGuard,
    add_common_options,
    drop_schema,
    filesystem_of,
    host_facts,
    machine_busy,
    one_line,
    package_versions,
    pg_conninfo,
    pg_facts,
    source_revision,
    url_schema,
    write_report,
)
from bench.spark.report import (
    BROWSE_LABEL,
    DELETE_LABEL,
    EXCLUSIVE_LABEL,
    FLOOR_LABEL,
    POSITION_FLOOR_LABEL,
    ROUNDS_LABEL,
    SPARK_BATCH_FLOOR_LABEL,
    SPARK_STREAM_FLOOR_LABEL,
    SUBSCRIPTION_LABEL,
    Cell,
    Run,
    Settings,
    render,
)
from sluice.backends.base import Reached

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


DEFAULT_PG_URL = f"{PG_CONNINFO}?schema=bench_spark"
JDBC_JAR = Path("/usr/share/java/postgresql.jar")
MASTER = "local[2]"
BODY_BYTES = 1024
FILL_CHUNK = 5_000
TAKE_CHUNK = 50_000
"""Messages per statement of a stream's take (sluice.spark.source)."""
BODY_SCHEMA = (
    "id BIGINT, customer STRING, items ARRAY<STRUCT<sku: STRING, qty: INT, price: DOUBLE>>,"
    " note STRING"
)
TOTAL_SQL = "round(aggregate(body.items, CAST(0 AS DOUBLE), (acc, i) -> acc + i.qty * i.price), 2)"
PIPELINE_SQL = (
    "SELECT named_struct('order', body.id, 'customer', body.customer,"
    f" 'total', {TOTAL_SQL}) AS body FROM messages"
)
# The columns of sluice's messages table that match what a sluice read yields (not the queue's
# name, which the table holds as queue_id).
JDBC_COLUMNS = (
    "id, priority, body, properties, content_type, type, grp, correlation_id, reply_to,"
    " attempts, enqueued_at, available_at, expires_at"
)


UrlMaker = Callable[[str], tuple[str, Callable[[], None]]]
"""A run's tag -> (database URL, clean-up to call after the run)."""


class VerifyError(Exception):
    """A run did not leave the queues as it must: its figure is void."""


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _error(exc: BaseException) -> str:
    if os.environ.get("BENCH_TRACEBACK"):
        traceback.print_exc(file=sys.stderr)
    text = one_line(exc)
    return f"VERIFY FAILED: {exc}" if isinstance(exc, VerifyError) else text


# ------------------------------------------------------------------------------ bodies


def make_body(n: int) -> dict[str, object]:
    """Order n as a JSON object of exactly BODY_BYTES bytes (json.dumps defaults)."""
    items = [
        {
            "sku": f"SKU-{(n * 31 + k) % 10007:05d}",
            "qty": 1 + (n + k) % 5,
            "price": ((n * 7 + k * 13) % 10_000) / 100,
        }
        for k in range(1 + n % 5)
    ]
    body: dict[str, object] = {
        "id": n,
        "customer": f"customer-{n % 9973:05d}",
        "items": items,
        "note": "",
    }
    body["note"] = "x" * max(BODY_BYTES - len(json.dumps(body)), 0)
    return body


def expected_total(n: int) -> float:
    items: Any = make_body(n)["items"]
    return round(float(sum(i["qty"] * i["price"] for i in items)), 2)


def fill(db: sluice.Database, queue: str, n: int) -> float:
    """Enqueue orders 0..n-1 in transactions of FILL_CHUNK; returns the seconds it took."""
    started = time.perf_counter()
    for first in range(0, n, FILL_CHUNK):
        bodies = [make_body(i) for i in range(first, min(first + FILL_CHUNK, n))]
        with db.transaction() as tx:
            tx.enqueue_many(queue, bodies)
    return time.perf_counter() - started


# ------------------------------------------------------------------------------ Spark


def build_session(master: str, jar: Path | None) -> SparkSession:
    """The session of the whole run: as ``sluice.spark.spark_session``, plus the JDBC jar."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import sluice.spark

    builder = (
        SparkSession.builder.master(master)
        .appName("sluice-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # recentProgress keeps 100 entries by default: a run may have more micro-batches.
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        .config("spark.driver.memory", "2g")
    )
    if jar is not None:
        builder = builder.config("spark.jars", str(jar))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sluice.spark.register(spark)
    from bench.spark.floor import FloorSource

    spark.dataSource.register(FloorSource)
    return spark


def measured(query: StreamingQuery, started: float, seconds: float) -> Run:
    """A finished query's run: wall time, rows, and its progress reports summed up.

    ``started``: ``time.time()`` when the timing began; the progress reports' timestamps
    (the JVM's clock, the same system clock) split the time outside the triggers into what
    came before the first one (load, start, initial offset) and after the last one (stop).
    """
    run = Run(seconds, rows=0)
    entries = query.recentProgress
    for p in entries:
        got = int(p.numInputRows)
        run.rows = (run.rows or 0) + got
        run.batches += 1 if got else 0
        for key, ms in p.durationMs.items():
            run.phases[key] = run.phases.get(key, 0.0) + ms / 1000
    if entries:
        first = dt.datetime.fromisoformat(entries[0].timestamp).timestamp()
        last = entries[-1]
        last_end = dt.datetime.fromisoformat(last.timestamp).timestamp()
        last_end += last.durationMs.get("triggerExecution", 0) / 1000
        run.before = max(first - started, 0.0)
        run.after = max(started + seconds - last_end, 0.0)
    return run


def _jdbc_url(conninfo: str) -> tuple[str, str]:
    parts = urlsplit(conninfo)
    host = parts.hostname or "127.0.0.1"
    return f"jdbc:postgresql://{host}:{parts.port or 5432}{parts.path}", parts.username or ""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ------------------------------------------------------------------------------ part 1: reads


class Reads:
    """The read measurements on one PostgreSQL schema, sharing a session and a connection."""

    def __init__(self, spark: SparkSession, url: str, tmp_root: Path, jar_ok: bool) -> None:
        self.spark = spark
        self.url = url
        self.conninfo = pg_conninfo(url)
        self.schema = url_schema(url) or "sluice"
        self.tmp_root = tmp_root
        self.jar_ok = jar_ok
        self.db = sluice.connect(url)
        self.counter = 0

    def close(self) -> None:
        self.db.close()

    def fresh_queue(self, n: int) -> tuple[str, float]:
        """A new queue holding orders 0..n-1, vacuumed; (its name, seconds to fill it)."""
        import psycopg

        self.counter += 1
        queue = f"reads_{self.counter}"
        self.db.create_queue(queue)
        seconds = fill(self.db, queue, n)
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(f"VACUUM ANALYZE {_quote(self.schema)}.messages")
        quiet_disk(self.conninfo)
        return queue, seconds

    def fresh_topic(self, n: int, subscriptions: int) -> tuple[str, list[str]]:
        """A new topic holding orders 0..n-1, with ``subscriptions`` subscriptions made
        before the fill (each receives every message); (topic, subscriptions)."""
        import psycopg

        self.counter += 1
        topic = f"topic_{self.counter}"
        self.db.create_topic(topic)
        subs = [f"{topic}_sub{k}" for k in range(subscriptions)]
        for sub in subs:
            self.db.subscribe(topic, sub)
        fill(self.db, topic, n)
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(f"VACUUM ANALYZE {_quote(self.schema)}.messages")
        quiet_disk(self.conninfo)
        return topic, subs

    def drop_topic(self, topic: str, subscriptions: list[str]) -> None:
        try:
            for sub in subscriptions:
                self.db.unsubscribe(sub)
            self.db.drop_queue(topic)
        except sluice.SluiceError as exc:
            _log(f"could not drop topic {topic}: {one_line(exc)}")

    def bounds(self, queue: str) -> tuple[int, int, int, int]:
        """(queue id, lowest id, highest id, count) of the queue's rows in the table."""
        import psycopg

        s = _quote(self.schema)
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            found = conn.execute(f"SELECT id FROM {s}.queues WHERE name = %s", (queue,)).fetchone()
            if found is None:
                raise VerifyError(f"queue {queue} is not in {self.schema}.queues")
            qid = int(found[0])
            row = conn.execute(
                f"SELECT min(id), max(id), count(*) FROM {s}.messages WHERE queue_id = %s", (qid,)
            ).fetchone()
        assert row is not None
        return qid, int(row[0] or 0), int(row[1] or 0), int(row[2])

    def body_bytes(self, queue: str) -> float:
        """Average stored body length of the queue's messages (as sluice encodes them)."""
        import psycopg

        s = _quote(self.schema)
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT avg(octet_length(m.body)) FROM {s}.messages m JOIN {s}.queues q"
                " ON q.id = m.queue_id WHERE q.name = %s",
                (queue,),
            ).fetchone()
        return float(row[0]) if row and row[0] is not None else 0.0

    def checked_bounds(self, queue: str, n: int) -> tuple[int, int, int]:
        """(queue id, lowest id, highest id) for the JDBC read, once the queue holds n rows."""
        if not self.jar_ok:
            raise RuntimeError(f"no JDBC driver at {JDBC_JAR}: install libpostgresql-jdbc-java")
        qid, low, high, count = self.bounds(queue)
        if count != n:
            raise VerifyError(f"queue {queue} holds {count} rows, not {n}")
        return qid, low, high

    def jdbc_frame(self, qid: int, low: int, high: int) -> Any:
        jdbc_url, user = _jdbc_url(self.conninfo)
        table = (
            f"(SELECT {JDBC_COLUMNS} FROM {_quote(self.schema)}.messages"
            f" WHERE queue_id = {qid}) AS m"
        )
        return (
            self.spark.read.format("jdbc")
            .option("url", jdbc_url)
            .option("driver", "org.postgresql.Driver")
            .option("user", user)
            .option("dbtable", table)
            .option("partitionColumn", "id")
            .option("lowerBound", str(low))
            .option("upperBound", str(high + 1))
            .option("numPartitions", "2")
            .option("fetchsize", "10000")
            .load()
        )

    def jdbc(self, queue: str, n: int) -> Run:
        # The partition bounds are the caller's to give to Spark: found before the timing.
        qid, low, high = self.checked_bounds(queue, n)
        started = time.perf_counter()
        self.jdbc_frame(qid, low, high).write.format("noop").mode("overwrite").save()
        return Run(time.perf_counter() - started)

    def browse_frame(self, queue: str) -> Any:
        return (
            self.spark.read.format("sluice")
            .option("url", self.url)
            .option("queue", queue)
            .option("partitions", "2")
            .load()
        )

    def browse(self, queue: str) -> Run:
        started = time.perf_counter()
        self.browse_frame(queue).write.format("noop").mode("overwrite").save()
        return Run(time.perf_counter() - started)

    def stream(
        self, queue: str, n: int, batch: int, partitions: int, *, exclusive: bool = False
    ) -> Run:
        """Consume the queue with a streaming read into noop; check it is empty afterwards.

        ``exclusive``: by position (option exclusive=true), else by claimed rounds; a
        subscription is read by position anyway.
        """
        name = f"bench-{queue}"
        with tempfile.TemporaryDirectory(prefix="bench-spark-ckpt-", dir=self.tmp_root) as ckpt:
            wall = time.time()
            started = time.perf_counter()
            reader = (
                self.spark.readStream.format("sluice")
                .option("url", self.url)
                .option("queue", queue)
                .option("name", name)
                .option("max_per_batch", str(batch))
            )
            if partitions > 1:
                reader = reader.option("partitions", str(partitions))
            if exclusive:
                reader = reader.option("exclusive", "true")
            query = (
                reader.load()
                .writeStream.format("noop")
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            seconds = time.perf_counter() - started
        run = measured(query, wall, seconds)
        left = {k: v for k, v in self.db.queue(queue).stats().items() if v}
        lag = sum(s.lag for s in self.db.subscriptions() if s.name == queue)
        if run.rows != n or left or lag:
            raise VerifyError(
                f"streaming read of {queue}: {run.rows} rows of {n}; left {left}, lag {lag}"
            )
        return run

    def floor(self, queue: str, n: int, batch: int) -> Run:
        """The streaming read's own statements, from this process, without Spark.

        Take a round (on PostgreSQL: move it into the stream's spool), fetch it as the
        tasks do, acknowledge it: what a consuming read costs whatever runs it. What is
        fetched is not turned into Spark's rows.
        """
        backend = self.db.backend
        stream = backend.open_stream(queue, f"floor-{queue}")
        started = time.perf_counter()
        rows = 0
        round_ = stream.round
        while True:
            taken = backend.stream_claim(stream.session, round_ + 1, queue, batch, None)
            if not taken:
                break
            round_ += 1
            backend.set_stream_round(stream.session, round_)
            share = (stream.session, round_ - 1, round_)
            rows += len(backend.stream_held(share[0], queue, *share[1:], spooled=False))
            rows += sum(t.num_rows for t in backend.stream_spooled(*share))
            backend.stream_settle(stream.session, queue, round_ - 1, round_)
        seconds = time.perf_counter() - started
        left = {k: v for k, v in self.db.queue(queue).stats().items() if v}
        if rows != n or left:
            raise VerifyError(f"floor read of {queue}: {rows} rows of {n}; left {left}")
        return Run(seconds, rows=rows)

    def spark_floor(self, n: int, batch: int | None, partitions: int) -> Run:
        """A Python source with no database (bench.spark.floor) read into noop: Spark alone.

        ``batch``: a streaming read with that max_per_batch; None: a batch read.
        """
        options = {"rows": str(n), "body_bytes": str(BODY_BYTES), "partitions": str(partitions)}
        if batch is None:
            started = time.perf_counter()
            frame = self.spark.read.format("sluice_floor").options(**options).load()
            frame.write.format("noop").mode("overwrite").save()
            return Run(time.perf_counter() - started)
        options["max_per_batch"] = str(batch)
        with tempfile.TemporaryDirectory(prefix="bench-spark-ckpt-", dir=self.tmp_root) as ckpt:
            wall = time.time()
            started = time.perf_counter()
            query = (
                self.spark.readStream.format("sluice_floor")
                .options(**options)
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            seconds = time.perf_counter() - started
        run = measured(query, wall, seconds)
        if run.rows != n:
            raise VerifyError(f"the floor stream read {run.rows} rows of {n}")
        return run

    def position_floor(self, subscription: str, n: int, batch: int) -> Run:
        """A subscription's read by position, its own statements, from this process alone.

        Find a range's end, read its pages and make them Arrow batches of a read's schema
        with the source's own functions, as a task does, move the pointer: what the position
        stream's own work costs, one process, without Spark.
        """
        from pyspark.sql.types import StructType

        from sluice.spark.rows import message_ddl
        from sluice.spark.source import _ahead, _batches, _range_pages  # what a task runs

        schema = cast(StructType, StructType.fromDDL(message_ddl(None)))
        backend = self.db.backend
        topic = self.db.queue(subscription).spec.topic
        assert topic is not None
        position, rows = backend.stream_pointer(subscription), 0
        started = time.perf_counter()
        while True:
            now = time.time()
            end, _ = backend.stream_span(
                topic, position, limit=batch, ceiling=2**62, now=now, select=None
            )
            if end == position:
                break
            # As a task reads its share: the source's own pages (windows of ids, in Arrow
            # columns where the backend reads them so), the next fetched ahead.
            pages = _ahead(_range_pages(backend, topic, position, end, at=now, select=None))
            rows += sum(b.num_rows for b in _batches(subscription, pages, schema))
            stream = backend.open_stream(subscription, "position-floor")
            backend.stream_settle(
                stream.session, subscription, 0, 0, reached=Reached(end, now, remove=False)
            )
            position = end
        seconds = time.perf_counter() - started
        if rows != n:
            raise VerifyError(f"position read of {subscription}: {rows} rows of {n}")
        return Run(seconds, rows=rows)

    def delete_only(self, queue: str, n: int) -> Run:
        """The DELETE inside the stream's take, alone: its pick and chunks, nothing returned.

        The statement is cut out of the backend's own take, so its conditions, order
        and locks are the take's.
        """
        import psycopg

        take: str = cast(Any, self.db.backend)._q["stream_take"]
        delete = take[take.index("COPY (") + len("COPY (") : take.index(" RETURNING ")]
        rows = 0
        started = time.perf_counter()
        with psycopg.connect(self.conninfo) as conn:
            while True:
                params = {"queue": queue, "limit": TAKE_CHUNK, "now": time.time()}
                got = conn.execute(delete, params).rowcount
                conn.commit()
                rows += got
                if got < TAKE_CHUNK:
                    break
        seconds = time.perf_counter() - started
        left = {k: v for k, v in self.db.queue(queue).stats().items() if v}
        if rows != n or left:
            raise VerifyError(f"DELETE of {queue}: {rows} rows of {n}; left {left}")
        return Run(seconds, rows=rows)

    def drop(self, queue: str) -> None:
        try:
            self.db.drop_queue(queue)
        except sluice.SluiceError as exc:
            _log(f"could not drop queue {queue}: {one_line(exc)}")

    def warm_up(self, n: int) -> None:
        self.spark_floor(n, None, 2)
        self.spark_floor(n, n, 2)
        topic, subs = self.fresh_topic(n, 2)
        got = self.jdbc_frame(*self.checked_bounds(topic, n)).count()
        if got != n:
            raise VerifyError(f"JDBC read {got} rows of {n}")
        got = self.browse_frame(topic).count()
        if got != n:
            raise VerifyError(f"sluice browse read {got} rows of {n}")
        for k, sub in enumerate(subs):
            self.stream(sub, n, n, k + 1)
        self.drop_topic(topic, subs)
        for parts in (1, 2):
            for exclusive in (False, True):
                queue, _ = self.fresh_queue(n)
                self.stream(queue, n, n, parts, exclusive=exclusive)
                self.drop(queue)


@dataclass
class ReadCells:
    """The cells of part 1, by what they measure."""

    jdbc: Cell
    browse: Cell
    subscriptions: dict[tuple[int, int], Cell]
    exclusive: dict[tuple[int, int], Cell]
    rounds: dict[tuple[int, int], Cell]
    floors: dict[int, Cell]
    delete: Cell
    position_floors: dict[int, Cell] = field(default_factory=dict)
    spark_floors: dict[int | None, Cell] = field(default_factory=dict)
    """Spark alone, per max_per_batch of a stream (None: a batch read)."""
    fills: list[float] = field(default_factory=list)


def run_reads(reads: Reads, s: Settings, cells: list[Cell], notes: list[str]) -> None:
    n = s.read_n
    grid = [(b, p) for b in s.read_batches for p in s.read_partitions]

    def cell(label: str, b: int | None = None, p: int | None = None) -> Cell:
        return Cell("read", label, "postgresql", n, batch=b, partitions=p)

    c = ReadCells(
        jdbc=cell("Spark JDBC source", p=2),
        browse=cell(BROWSE_LABEL, p=2),
        subscriptions={k: cell(SUBSCRIPTION_LABEL, *k) for k in grid},
        exclusive={k: cell(EXCLUSIVE_LABEL, *k) for k in grid},
        rounds={k: cell(ROUNDS_LABEL, *k) for k in grid},
        floors={b: cell(FLOOR_LABEL, b, 1) for b in s.read_batches},
        delete=cell(DELETE_LABEL, p=1),
        position_floors={b: cell(POSITION_FLOOR_LABEL, b, 1) for b in s.read_batches},
        spark_floors={
            None: cell(SPARK_BATCH_FLOOR_LABEL, p=2),
            **{b: cell(SPARK_STREAM_FLOOR_LABEL, b, 2) for b in s.read_batches},
        },
    )
    cells += [c.jdbc, c.browse, *c.subscriptions.values(), *c.position_floors.values()]
    cells += c.spark_floors.values()
    cells += c.exclusive.values()
    cells += c.rounds.values()
    if s.bounds:
        cells += [*c.floors.values(), c.delete]
    _warm_readers(reads, c, n, notes)
    stored = 0.0
    for rep in range(s.repeats):
        tag = f"read run {rep + 1}/{s.repeats}"
        stored = _read_topic(reads, c, n, tag) or stored
        _read_queues(reads, c, n, tag)
        if s.bounds:
            _read_bounds(reads, c, n, tag)
    if stored:
        notes.append(
            f"Bodies as stored by sluice on PostgreSQL: {stored:,.0f} bytes on average"
            f" (json.dumps: {BODY_BYTES:,})."
        )
    if c.fills:
        notes.append(
            "Filling the read queues (untimed; building bodies included), sluice"
            f" enqueue_many in transactions of {FILL_CHUNK:,}: median"
            f" {sorted(c.fills)[len(c.fills) // 2]:,.0f} msgs/s."
        )


WARM_MOST = 8
"""Untimed full-size runs at most per reader of the warm pass."""

WARM_STREAMS = 2
"""Untimed full-size runs of each subscription stream in the warm pass."""


def _warm_readers(reads: Reads, c: ReadCells, n: int, notes: list[str]) -> None:
    """Untimed, at full size: the topic's readers run until they are steady.

    The JVM compiles a reader's row path only once it has read many rows: in
    bench/results/spark-2026-12-06b.md Spark's JDBC source read 500,000 rows in 2.55, 2.10,
    1.11, 1.02 and 0.95 s on successive reads, so a median of three runs after a warm-up on
    1,000 rows compared the streams with a JDBC read still being compiled. JDBC, the browse
    and Spark alone run until a run is no faster than the best before it (at most WARM_MOST
    runs); each subscription stream, which consumes what it reads, runs WARM_STREAMS times.
    """
    tag = "warm pass"
    subscriptions = list(c.subscriptions) * WARM_STREAMS
    try:
        topic, names = reads.fresh_topic(n, len(subscriptions))
    except Exception as exc:
        notes.append(f"the warm pass could not fill its topic: {_error(exc)}")
        _log(notes[-1])
        return
    runs: dict[str, list[float]] = {}

    def steady(label: str, fn: Callable[[], Run]) -> None:
        seconds = runs.setdefault(label, [])
        while len(seconds) < WARM_MOST:
            seconds.append(fn().seconds)
            _log(f"{tag}: {label}: {seconds[-1]:.2f} s")
            if len(seconds) > 1 and seconds[-1] >= min(seconds[:-1]):
                return

    try:
        steady("Spark JDBC source", functools.partial(reads.jdbc, topic, n))
        steady(BROWSE_LABEL, functools.partial(reads.browse, topic))
        for (batch, parts), name in zip(subscriptions, names, strict=True):
            label = f"subscription stream B={batch} p={parts}"
            run = reads.stream(name, n, batch, parts)
            runs.setdefault(label, []).append(run.seconds)
            _log(f"{tag}: {label}: {run.seconds:.2f} s")
        for floor_batch in c.spark_floors:
            run_floor = functools.partial(reads.spark_floor, n, floor_batch, 2)
            steady(f"Spark alone B={floor_batch or '-'}", run_floor)
    except Exception as exc:
        notes.append(f"the warm pass failed: {_error(exc)}")
        _log(notes[-1])
    finally:
        reads.drop_topic(topic, names)
    listed = "; ".join(
        f"{label} {', '.join(f'{t:.2f}' for t in seconds)}" for label, seconds in runs.items()
    )
    notes.append(
        f"Warm pass before the timed runs (untimed, {n:,} messages, seconds per run): {listed}."
    )


def _read_topic(reads: Reads, c: ReadCells, n: int, tag: str) -> float:
    """The peer, the browse and the subscriptions' streams, on one topic; the body size.

    A subscription's read leaves its topic's messages where they are: they all read one
    fill.
    """
    try:
        topic, names = reads.fresh_topic(n, len(c.subscriptions) + len(c.position_floors))
    except Exception as exc:
        c.jdbc.errors.append(f"fill: {_error(exc)}")
        _log(f"{tag}: fill failed: {one_line(exc)}")
        return 0.0
    stored = reads.body_bytes(topic)
    _measure(c.jdbc, functools.partial(reads.jdbc, topic, n), f"{tag}: JDBC", n)
    _measure(c.browse, functools.partial(reads.browse, topic), f"{tag}: browse", n)
    streamed = names[: len(c.subscriptions)]
    for ((batch, parts), cell), name in zip(c.subscriptions.items(), streamed, strict=True):
        run = functools.partial(reads.stream, name, n, batch, parts)
        _measure(cell, run, f"{tag}: subscription B={batch} p={parts}", n)
    alone = names[len(c.subscriptions) :]
    for (batch, cell), name in zip(c.position_floors.items(), alone, strict=True):
        run = functools.partial(reads.position_floor, name, n, batch)
        _measure(cell, run, f"{tag}: position read alone B={batch}", n)
    reads.drop_topic(topic, names)
    for floor_batch, cell in c.spark_floors.items():
        run = functools.partial(reads.spark_floor, n, floor_batch, 2)
        _measure(cell, run, f"{tag}: Spark alone B={floor_batch}", n)
    return stored


def _read_queues(reads: Reads, c: ReadCells, n: int, tag: str) -> None:
    """The streams of plain queues, each on a fresh queue: exclusive, then by rounds."""
    for grid, exclusive in ((c.exclusive, True), (c.rounds, False)):
        for (batch, parts), cell in grid.items():
            try:
                queue, seconds = reads.fresh_queue(n)
            except Exception as exc:
                cell.errors.append(f"fill: {_error(exc)}")
                _log(f"{tag}: fill failed: {one_line(exc)}")
                continue
            c.fills.append(n / seconds)
            run = functools.partial(reads.stream, queue, n, batch, parts, exclusive=exclusive)
            how = "exclusive" if exclusive else "rounds"
            _measure(cell, run, f"{tag}: {how} B={batch} p={parts}", n)
            reads.drop(queue)


def _read_bounds(reads: Reads, c: ReadCells, n: int, tag: str) -> None:
    """The claimed rounds' statements without Spark, and their take's DELETE alone."""
    for batch, cell in c.floors.items():
        try:
            queue, _ = reads.fresh_queue(n)
        except Exception as exc:
            cell.errors.append(f"fill: {_error(exc)}")
            continue
        _measure(cell, functools.partial(reads.floor, queue, n, batch), f"{tag}: floor", n)
        reads.drop(queue)
    try:
        queue, _ = reads.fresh_queue(n)
    except Exception as exc:
        c.delete.errors.append(f"fill: {_error(exc)}")
        return
    _measure(c.delete, functools.partial(reads.delete_only, queue, n), f"{tag}: DELETE", n)
    reads.drop(queue)


def _measure(cell: Cell, fn: Callable[[], Run], tag: str, n: int) -> None:
    busy = machine_busy()
    try:
        run = fn()
    except Exception as exc:
        cell.errors.append(_error(exc))
        _log(f"{tag}: error: {one_line(exc)}")
        return
    run.cpu = machine_busy() - busy
    cell.runs.append(run)
    _log(f"{tag}: {run.seconds:.2f} s, {n / run.seconds:,.0f} msgs/s")


# ------------------------------------------------------------------------------ part 2: pipelines


def quiet_disk(pg_conninfo: str | None) -> None:
    """Untimed: write out what is pending, so a run does not pay for the one before it.

    A read of 500,000 messages leaves gigabytes of WAL behind; the checkpoint they set
    off slowed the fsyncs of the SQLite pipeline that came next by a third.
    """
    if pg_conninfo is not None:
        import psycopg

        try:
            with psycopg.connect(pg_conninfo, autocommit=True) as conn:
                conn.execute("CHECKPOINT")
        except psycopg.Error as exc:  # not a superuser: the run goes on without
            _log(f"CHECKPOINT refused: {one_line(exc)}")
    os.sync()


def pipeline_once(
    spark: SparkSession,
    url: str,
    *,
    n: int,
    batch: int,
    tag: str,
    tmp_root: Path,
    pg_conninfo: str | None,
    exclusive: bool = False,
) -> Run:
    """Fill orders_<tag>, run the pipeline to billing_<tag>, check both queues."""
    from sluice.spark import run_pipeline

    source, target = f"orders_{tag}", f"billing_{tag}"
    db = sluice.connect(url)
    try:
        db.create_queue(source)
        db.create_queue(target)
        fill(db, source, n)
        quiet_disk(pg_conninfo)
        with tempfile.TemporaryDirectory(prefix="bench-spark-ckpt-", dir=tmp_root) as ckpt:
            wall = time.time()
            started = time.perf_counter()
            query = run_pipeline(
                spark,
                url,
                source=source,
                name=f"bench-{tag}",
                checkpoint=ckpt,
                sql={target: PIPELINE_SQL},
                body_schema=BODY_SCHEMA,
                max_per_batch=batch,
                once=True,
                exclusive=exclusive,
            )
            seconds = time.perf_counter() - started
        run = measured(query, wall, seconds)
        _verify_pipeline(db, source, target, n, run.rows or 0)
        for queue in (source, target):
            with contextlib.suppress(sluice.SluiceError):
                db.drop_queue(queue)
        return run
    finally:
        db.close()


def _verify_pipeline(db: sluice.Database, source: str, target: str, n: int, rows: int) -> None:
    made = db.queue(target).stats()
    left = {k: v for k, v in db.queue(source).stats().items() if v}
    problems = []
    if rows != n:
        problems.append(f"the query read {rows} rows of {n}")
    if made["ready"] != n or sum(made.values()) != n:
        problems.append(f"{target} holds {made}, not {n} ready")
    if left:
        problems.append(f"{source} still holds {left}")
    sample = db.queue(target).browse(limit=1)
    if sample:
        body = sample[0].body
        if not isinstance(body, dict) or set(body) != {"order", "customer", "total"}:
            problems.append(f"unexpected billing body {body!r:.120}")
        elif abs(float(body["total"]) - expected_total(int(body["order"]))) > 1e-6:
            problems.append(f"wrong total in {body!r:.120}")
    if problems:
        raise VerifyError("; ".join(problems))


def run_pipelines(
    spark: SparkSession,
    urls: dict[str, UrlMaker],
    s: Settings,
    cells: list[Cell],
    *,
    tmp_root: Path,
    pg_conninfo: str | None,
) -> None:
    grid = {
        (backend, b, x): Cell("pipeline", "pipeline exclusive" if x else "pipeline", backend,
                              s.pipe_n, batch=b)
        for backend in urls
        for b in s.pipe_batches
        for x in ((False, True) if s.pipe_exclusive else (False,))
    }  # fmt: skip
    cells += grid.values()
    # Interleaved: repeat 1 of every cell, then repeat 2...; drift spreads over all of them.
    for rep in range(s.repeats):
        for (backend, batch, exclusive), cell in grid.items():
            tag = f"{backend[:2]}{batch}{'x' if exclusive else ''}r{rep}"
            url, cleanup = urls[backend](tag)
            try:
                _measure(
                    cell,
                    functools.partial(
                        pipeline_once,
                        spark,
                        url,
                        n=s.pipe_n,
                        batch=batch,
                        tag=tag,
                        tmp_root=tmp_root,
                        pg_conninfo=pg_conninfo,
                        exclusive=exclusive,
                    ),
                    f"{cell.label} {backend} B={batch} run {rep + 1}/{s.repeats}",
                    s.pipe_n,
                )
            finally:
                cleanup()


# ------------------------------------------------------------------------------ main


def _java_version() -> str:
    try:
        done = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = (done.stderr or done.stdout).splitlines()
    return lines[0].strip() if lines else "unknown"


def _jdbc_driver() -> str:
    if not JDBC_JAR.exists():
        return f"{JDBC_JAR} missing (apt-get install libpostgresql-jdbc-java)"
    try:
        done = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "libpostgresql-jdbc-java"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        version = done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        version = ""
    return f"{JDBC_JAR}" + (f" (libpostgresql-jdbc-java {version})" if version else "")


def _pg_durability(conninfo: str) -> str:
    try:
        import psycopg

        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            got = {
                str(name): str(value)
                for name, value in conn.execute(
                    "SELECT name, setting FROM pg_settings"
                    " WHERE name IN ('synchronous_commit', 'fsync')"
                ).fetchall()
            }
    except Exception as exc:
        return f"unreachable: {one_line(exc)}"
    return (
        f"synchronous_commit={got.get('synchronous_commit', '?')},"
        f" fsync={got.get('fsync', '?')} (read back from the server); sluice's commits that"
        " enqueue, publish or acknowledge wait for the WAL flush"
    )


def _sqlite_durability(tmp_root: Path) -> str:
    with tempfile.TemporaryDirectory(prefix="bench-spark-probe-", dir=tmp_root) as tmp:
        path = Path(tmp) / "probe.db"
        sluice.connect(f"sqlite:///{path}").close()
        conn = sqlite3.connect(path)
        try:
            journal = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
        finally:
            conn.close()
    device, mount, fstype = filesystem_of(tmp_root)
    text = (
        f"journal_mode={journal.upper()} (read back from a sluice file), synchronous=FULL"
        f" (sluice's default: fsync at every commit); files in {tmp_root} on {device}"
        f" ({fstype}, mounted at {mount})"
    )
    if fstype in MEMORY_FS:
        text += f" -- WARNING: {fstype}, fsync costs nothing there; use --tmp-dir on disk"
    return text


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench spark",
        description="sluice on Spark: streaming read vs Spark's JDBC source on PostgreSQL, and"
        " queue -> Spark SQL -> queue pipelines on SQLite and PostgreSQL.",
    )
    p.add_argument("--read-n", type=int, help="messages per read (default 500,000)")
    p.add_argument("--pipe-n", type=int, help="messages per pipeline run (default 100,000)")
    p.add_argument(
        "--read-batch", type=int, action="append", help="max_per_batch of the streaming read"
    )
    p.add_argument(
        "--batch", type=int, action="append", help="max_per_batch of the pipeline (repeatable)"
    )
    p.add_argument(
        "--pipe-exclusive",
        action="store_true",
        help="pipelines also with exclusive=True (the source read by id range)",
    )
    p.add_argument("--warmup-n", type=int, default=1_000)
    p.add_argument(
        "--no-bounds",
        action="store_true",
        help="leave out the rows of the claimed rounds' statements and DELETE without Spark",
    )
    p.add_argument(
        "--backend", choices=("sqlite", "postgresql"), action="append", help="pipeline backends"
    )
    p.add_argument("--pg-url", default=DEFAULT_PG_URL, help=f"default {DEFAULT_PG_URL}")
    p.add_argument("--jdbc-jar", type=Path, default=JDBC_JAR)
    p.add_argument("--master", default=MASTER)
    add_common_options(
        p,
        quick="smoke run: 20,000 messages, 1 repeat",
        repeats=None,
        tmp_dir=Path(tempfile.gettempdir()),
        only=("read", "pipeline"),
        only_help="run only this part",
    )
    p.add_argument("--repeats", type=int, help="runs per cell (default 3)")
    return p.parse_args(argv)


def _settings(args: argparse.Namespace) -> Settings:
    quick: bool = args.quick

    def pick(value: int | None, full: int, small: int) -> int:
        return value if value is not None else (small if quick else full)

    return Settings(
        read_n=pick(args.read_n, 500_000, 20_000),
        pipe_n=pick(args.pipe_n, 100_000, 20_000),
        read_batches=tuple(args.read_batch or ([5_000] if quick else [250_000])),
        pipe_batches=tuple(args.batch or ([5_000, 10_000] if quick else [50_000])),
        read_partitions=(1, 2),
        backends=tuple(args.backend or ("sqlite", "postgresql")),
        repeats=pick(args.repeats, 3, 1),
        warmup_n=args.warmup_n,
        body_bytes=BODY_BYTES,
        body_schema=BODY_SCHEMA,
        pipeline_sql=PIPELINE_SQL,
        master=args.master,
        quick=quick,
        bounds=not args.no_bounds,
        pipe_exclusive=args.pipe_exclusive,
    )


def _pg_schema_ready(url: str) -> SchemaGuard:
    """A guard for the run's own schema; one left over by an interrupted run is dropped."""
    schema = url_schema(url)
    guard = SchemaGuard(url)
    if guard.preexisting and schema and schema.startswith("bench_spark"):
        drop_schema(pg_conninfo(url), schema)
        guard.preexisting = False
    elif guard.preexisting:
        raise SystemExit(f"schema {schema!r} exists already; pass a --pg-url naming a new one")
    return guard


def _url_makers(backends: tuple[str, ...], pg: str, tmp_root: Path) -> dict[str, UrlMaker]:
    def sqlite_url(tag: str) -> tuple[str, Callable[[], None]]:
        tmp = Path(tempfile.mkdtemp(prefix=f"bench-spark-{tag}-", dir=tmp_root))
        return f"sqlite:///{tmp / 'queues.db'}", functools.partial(shutil.rmtree, tmp, True)

    def pg_url(tag: str) -> tuple[str, Callable[[], None]]:
        return pg, lambda: None

    makers: dict[str, UrlMaker] = {"sqlite": sqlite_url, "postgresql": pg_url}
    return {b: makers[b] for b in backends}


def _facts(s: Settings, tmp_root: Path, url: str, use_pg: bool) -> list[tuple[str, str]]:
    device, mount, fstype = filesystem_of(tmp_root)
    facts = host_facts()
    facts += [
        ("Temp dir", f"{tmp_root} on {device} ({fstype}, mounted at {mount})"),
        ("SQLite library", sqlite3.sqlite_version),
    ]
    if use_pg:
        facts += pg_facts(pg_conninfo(url))
    facts += [
        ("Java", _java_version()),
        ("JDBC driver", _jdbc_driver()),
        ("Packages", package_versions(("sluice", "pyspark", "pyarrow", "psycopg"))),
        ("sluice source", source_revision()),
        (
            "Spark session",
            f"{s.master}, spark.sql.shuffle.partitions=2, UI off, spark.driver.memory=2g,"
            " spark.sql.streaming.numRecentProgressUpdates=100000,"
            " PYSPARK_PYTHON=this interpreter,"
            " SPARK_LOCAL_IP=127.0.0.1",
        ),
    ]
    return facts


def _warm_up(
    spark: SparkSession,
    reads: Reads | None,
    urls: dict[str, UrlMaker],
    *,
    s: Settings,
    tmp_root: Path,
    notes: list[str],
) -> None:
    """Every query once on a small queue: JVM classes, Python workers, JDBC driver, imports."""
    if reads is not None:
        try:
            reads.warm_up(s.warmup_n)
        except Exception as exc:
            notes.append(f"warm-up of the reads failed: {_error(exc)}")
            _log(notes[-1])
    for backend, make in urls.items():
        tag = f"warm{backend[:2]}"
        url, cleanup = make(tag)
        try:
            pipeline_once(
                spark,
                url,
                n=s.warmup_n,
                batch=min(s.pipe_batches),
                tag=tag,
                tmp_root=tmp_root,
                pg_conninfo=None,
            )
        except Exception as exc:
            notes.append(f"warm-up of the {backend} pipeline failed: {_error(exc)}")
            _log(notes[-1])
        finally:
            cleanup()


def _tear_down(
    spark: SparkSession | None, reads: Reads | None, guard: SchemaGuard | None, notes: list[str]
) -> None:
    if reads is not None:
        reads.close()
    if spark is not None:
        spark.stop()
    # The Databases run_pipeline opened in this process, closed before their schema goes
    # (else their atexit close fails noisily on the dropped tables).
    from sluice.spark.options import close_connections

    close_connections()
    if guard is not None:
        notes.append(guard.cleanup() or f"schema {guard.schema} dropped at the end")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    s = _settings(args)
    parts = set(args.only or ("read", "pipeline"))
    tmp_root: Path = args.tmp_dir.resolve()
    url: str = args.pg_url
    use_pg = "read" in parts or "postgresql" in s.backends
    jar: Path | None = args.jdbc_jar if args.jdbc_jar.exists() else None

    facts = _facts(s, tmp_root, url, use_pg)
    durability: list[tuple[str, str]] = []
    if "pipeline" in parts and "sqlite" in s.backends:
        durability.append(("SQLite", _sqlite_durability(tmp_root)))
    if use_pg:
        durability.append(("PostgreSQL", _pg_durability(pg_conninfo(url))))

    cells: list[Cell] = []
    notes: list[str] = []
    guard = _pg_schema_ready(url) if use_pg else None
    started = time.perf_counter()
    spark: SparkSession | None = None
    reads: Reads | None = None
    try:
        spark = build_session(s.master, jar)
        session_seconds = time.perf_counter() - started
        _log(f"Spark session: {session_seconds:.1f} s")
        urls = _url_makers(s.backends, url, tmp_root) if "pipeline" in parts else {}
        if "read" in parts:
            reads = Reads(spark, url, tmp_root, jar is not None)
        t0 = time.perf_counter()
        _warm_up(spark, reads, urls, s=s, tmp_root=tmp_root, notes=notes)
        warm_seconds = time.perf_counter() - t0
        _log(f"warm-up: {warm_seconds:.1f} s")
        notes.append(
            f"Not counted in any figure: Spark session start {session_seconds:.1f} s,"
            f" warm-up {warm_seconds:.1f} s."
        )
        if reads is not None:
            run_reads(reads, s, cells, notes)
        if urls:
            pg = pg_conninfo(url) if "postgresql" in urls or reads is not None else None
            run_pipelines(spark, urls, s, cells, tmp_root=tmp_root, pg_conninfo=pg)
    finally:
        _tear_down(spark, reads, guard, notes)

    report = render(cells, s, facts, durability, notes)
    report += f"\nTotal run time: {(time.perf_counter() - started) / 60:,.1f} min.\n"
    out: Path | None = args.out
    if out is None and args.quick:
        out = tmp_root / "spark-quick.md"
    write_report("spark", report, out)
    return 1 if any(c.errors for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
