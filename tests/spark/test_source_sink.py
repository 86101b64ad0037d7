"""The ``sluice`` Spark data source and sink against SQLite and PostgreSQL, on one local session."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import StringType, StructField, StructType

import sluice
from sluice.backends.records import sink_host
from sluice.engine.transaction import Transaction
from sluice.spark import drop_stream, register
from sluice.spark.options import Options
from sluice.spark.sink import BatchWriter, StreamWriter

pytestmark = pytest.mark.usefixtures("spark")


@pytest.fixture
def url(shared_url: str) -> str:
    return shared_url


@pytest.fixture
def db(url: str) -> Iterator[sluice.Database]:
    with sluice.connect(url) as database:
        database.create_queue("orders")
        database.create_queue("out")
        yield database


def _read(spark: SparkSession, url: str, **options: str) -> Any:
    reader = spark.read.format("sluice").option("url", url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _bodies(db: sluice.Database, queue: str) -> list[Any]:
    return [m.body for m in db.queue(queue).browse(limit=100_000)]


def _stream(
    spark: SparkSession, url: str, checkpoint: Path, *, name: str = "s1", **options: str
) -> Any:
    reader = (
        spark.readStream.format("sluice")
        .option("url", url)
        .option("queue", "orders")
        .option("name", name)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .selectExpr("body", "'out' AS queue", "priority")
        .writeStream.format("sluice")
        .option("url", url)
        .option("name", name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


# --- batch read ----------------------------------------------------------------------------


def test_batch_read_gives_every_column(spark: SparkSession, db: sluice.Database, url: str) -> None:
    q = db.queue("orders")
    first = q.put({"n": 1}, priority=5, properties={"region": "eu", "weight": 2.5})
    second = q.put("plain text", correlation_id="c-1", reply_to="replies", group="g1")
    rows = {r["id"]: r for r in _read(spark, url, queue="orders").collect()}
    assert set(rows) == {first, second}
    one, two = rows[first], rows[second]
    assert (one["queue"], one["priority"], json.loads(one["body"])) == ("orders", 5, {"n": 1})
    assert one["properties"] == {"region": "eu", "weight": "2.5"}
    assert one["content_type"] == "application/json"
    assert one["attempts"] == 0
    assert one["enqueued_at"] is not None
    assert one["expires_at"] is None
    assert (two["body"], two["content_type"]) == ("plain text", "text/plain; charset=utf-8")
    assert (two["correlation_id"], two["reply_to"], two["group"]) == ("c-1", "replies", "g1")
    assert len(q) == 2  # browsing takes nothing


def test_batch_read_with_selector_and_body_schema(
    spark: SparkSession, db: sluice.Database, url: str
) -> None:
    q = db.queue("orders")
    q.put_many([{"n": n, "city": f"c{n}", "tags": ["a"]} for n in range(10)])
    q.put({"n": "not a number", "city": 7})
    df = _read(
        spark,
        url,
        queue="orders",
        where="body.n >= 7",
        body_schema="n BIGINT, city STRING, tags ARRAY<STRING>",
    )
    assert [f.name for f in df.schema["body"].dataType.fields] == ["n", "city", "tags"]
    got = sorted((r.body.n, r.body.city, r.body.tags) for r in df.collect())
    assert got == [(7, "c7", ["a"]), (8, "c8", ["a"]), (9, "c9", ["a"])]
    every = _read(spark, url, queue="orders", body_schema="n BIGINT, city STRING").collect()
    odd = [r.body for r in every if r.body.n is None]
    assert [(b.n, b.city) for b in odd] == [(None, "7")]  # a misfit is NULL, text is kept


def test_pushed_filters_are_applied_fully(
    spark: SparkSession, db: sluice.Database, url: str, request: pytest.FixtureRequest
) -> None:
    q = db.queue("orders")
    for n in range(30):
        q.put({"n": n}, priority=n % 5, correlation_id=None if n % 3 else f"c{n}")
    cases: dict[str, Callable[[Any], bool]] = {
        "priority >= 3": lambda r: r.priority >= 3,
        "priority IN (0, 4) AND correlation_id IS NULL": lambda r: (
            r.priority in (0, 4) and r.correlation_id is None
        ),
        "correlation_id = 'c9' OR priority = 1": lambda r: (
            r.correlation_id == "c9" or r.priority == 1
        ),
        "type IS NULL AND priority < 2 AND body.n > 3": lambda r: (
            r.type is None and r.priority < 2 and r.body.n > 3
        ),
    }
    everything = _read(spark, url, queue="orders", body_schema="n BIGINT").collect()
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    request.addfinalizer(lambda: spark.conf.unset("spark.sql.python.filterPushdown.enabled"))
    for condition, keep in cases.items():
        # Pushdown is for a DataFrame read for one query (see pushFilters).
        df = _read(spark, url, queue="orders", body_schema="n BIGINT", pushdown="true")
        plan = str(df.filter(condition)._jdf.queryExecution().executedPlan().toString())
        got = sorted(r.body.n for r in df.filter(condition).collect())
        assert got == sorted(r.body.n for r in everything if keep(r)), condition
        if condition == "priority >= 3":
            assert "Filter (" not in plan  # taken by the database: Spark filters nothing
    # Without the option a DataFrame can be filtered again and again.
    df = _read(spark, url, queue="orders", body_schema="n BIGINT")
    assert df.filter("priority >= 3").count() == 12
    assert df.count() == 30


def test_large_queue_reads_in_parallel_partitions(
    spark: SparkSession, db: sluice.Database, url: str
) -> None:
    db.queue("orders").put_many([{"n": n} for n in range(1000)])
    df = _read(spark, url, queue="orders", rows_per_partition="300")
    assert df.rdd.getNumPartitions() == 4
    got = [json.loads(r.body)["n"] for r in df.collect()]
    assert sorted(got) == list(range(1000))


def test_explicit_registration_and_bad_options(
    spark: SparkSession, db: sluice.Database, url: str
) -> None:
    register(spark)
    assert _read(spark, url, queue="orders").count() == 0
    with pytest.raises(Exception, match="needs option queue"):
        _read(spark, url).collect()
    with pytest.raises(Exception, match="does not exist"):
        _read(spark, url, queue="nope").collect()
    with pytest.raises(Exception, match="unknown option"):
        _read(spark, url, queue="orders", limit="3").collect()
    with pytest.raises(Exception, match="memory:// queues live in one process"):
        _read(spark, "memory://", queue="orders").collect()
    with pytest.raises(Exception, match=r"(?i)expression|parse|unknown"):
        _read(spark, url, queue="orders", where="body.n >>> 1").collect()


# --- batch write ---------------------------------------------------------------------------


def test_batch_write_then_read_back(spark: SparkSession, db: sluice.Database, url: str) -> None:
    df = spark.createDataFrame(
        [(n, f"g{n % 2}") for n in range(20)], "n BIGINT, grp STRING"
    ).selectExpr(
        "named_struct('n', n, 'label', concat('x', n)) AS body",
        "n % 3 AS priority",
        "map('k', cast(n AS STRING)) AS properties",
        "grp AS group",
        "concat('c', n) AS correlation_id",
    )
    df.write.format("sluice").option("url", url).option("queue", "out").mode("append").save()
    back = _read(spark, url, queue="out", body_schema="n BIGINT, label STRING").collect()
    assert sorted((r.body.n, r.body.label) for r in back) == [(n, f"x{n}") for n in range(20)]
    by_n = {r.body.n: r for r in back}
    assert by_n[7].priority == 1
    assert by_n[7].properties == {"k": "7"}
    assert (by_n[7].group, by_n[7].correlation_id) == ("g1", "c7")
    # Per group, enqueue order holds: only each group's head is ready to take.
    with db.transaction() as tx:
        got = tx.dequeue("out", limit=2)
    assert sorted(m.body["n"] for m in got) in ([0, 1], [1, 0])


def test_json_text_bodies_and_routing_by_queue_column(
    spark: SparkSession, db: sluice.Database, url: str
) -> None:
    df = spark.createDataFrame(
        [('{"a": 1}', "orders"), ("[1, 2]", "out"), ('"s"', "out")], "body STRING, queue STRING"
    )
    df.write.format("sluice").option("url", url).mode("append").save()
    assert _bodies(db, "orders") == [{"a": 1}]
    assert sorted(map(json.dumps, _bodies(db, "out"))) == ['"s"', "[1, 2]"]


def test_failed_write_publishes_nothing_and_leaves_nothing(
    spark: SparkSession, db: sluice.Database, url: str
) -> None:
    rows = [('{"n": 1}',)] * 50 + [("{broken",)]
    df = spark.createDataFrame(rows, "body STRING").repartition(2)
    with pytest.raises(Exception, match="not JSON"):
        df.write.format("sluice").option("url", url).option("queue", "out").mode("append").save()
    # Spark aborts the job while the other task may still run: once it has ended,
    # its staged rows are gone whether it finished before the abort or after.
    _await_no_running_tasks(spark)
    assert db.queue("out").stats()["pending"] == 0
    assert len(db.queue("out")) == 0
    assert _write_sessions(url) == 0


def test_a_write_leaves_no_session_behind(
    spark: SparkSession, db: sluice.Database, url: str
) -> None:
    df = spark.createDataFrame([('{"n": 1}',)] * 10, "body STRING").repartition(3)
    df.write.format("sluice").option("url", url).option("queue", "out").mode("append").save()
    assert len(db.queue("out")) == 10
    assert _write_sessions(url) == 0


def _writer(url: str) -> BatchWriter:
    return BatchWriter(Options.parse({"url": url, "queue": "out"}), _BODY, False)


_BODY = StructType([StructField("body", StringType())])


def _body_batches(n: int) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pylist([{"body": json.dumps({"n": i})} for i in range(n)])


def test_abort_drops_the_rows_of_a_task_spark_did_not_report(db: sluice.Database, url: str) -> None:
    writer = _writer(url)
    staged = writer.write(_body_batches(7))  # a task that finished after the job failed
    assert db.queue("out").stats()["pending"] == 7
    writer.abort([])  # Spark's abort only has the messages of tasks it heard from
    assert db.queue("out").stats()["pending"] == 0
    assert staged.part is not None
    assert len(db.queue("out")) == 0
    assert _write_sessions(url) == 0


def test_a_task_that_starts_after_the_abort_stages_nothing(db: sluice.Database, url: str) -> None:
    writer = _writer(url)
    writer.abort([])
    with pytest.raises(sluice.LeaseLost, match="aborted"):
        writer.write(_body_batches(5))
    assert db.queue("out").stats()["pending"] == 0
    assert _write_sessions(url) == 0


def test_rows_flushed_after_the_abort_go_with_the_task(db: sluice.Database, url: str) -> None:
    writer = _writer(url)

    def abort_midway() -> Iterator[pa.RecordBatch]:
        yield from _body_batches(3)
        writer.abort([])  # the abort lands between this task's flushes
        yield from _body_batches(4)

    with pytest.raises(sluice.LeaseLost, match="aborted"):
        writer.write(abort_midway())
    assert db.queue("out").stats()["pending"] == 0
    assert _write_sessions(url) == 0


def test_a_stream_batch_abort_drops_every_task_of_that_batch(db: sluice.Database, url: str) -> None:
    options = Options.parse({"url": url, "queue": "out", "name": "snk"})
    writer = StreamWriter(options, _BODY, False)
    staged = {}
    for batch, rows in ((3, 4), (3, 2), (4, 5)):  # two tasks of batch 3, one of batch 4
        session = db.backend.open_session(sink_host("snk"), batch, 3600)
        tx = Transaction(db.context, owner=(session, 1))
        tx.enqueue_many("out", [{"n": n} for n in range(rows)])
        staged[session] = tx.stage()
    assert db.queue("out").stats()["pending"] == 11
    writer.abort([], 3)  # neither of batch 3's tasks reported
    assert db.queue("out").stats()["pending"] == 5  # batch 4's rows wait for batch 4
    assert len(db.queue("out")) == 0


def _write_sessions(url: str) -> int:
    """Sessions of batch writes still registered (their rows would wait for the lease)."""
    query = "SELECT count(*) FROM {}sessions WHERE host LIKE 'spark-write:%'"
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            return int(conn.execute(query.format("")).fetchone()[0])
    base, _, params = url.partition("?")
    schema = dict(p.split("=", 1) for p in params.split("&"))["schema"]
    with psycopg.connect(base) as pg:
        found = pg.execute(query.format(f'"{schema}".')).fetchone()
        assert found is not None
        return int(found[0])


def _await_no_running_tasks(spark: SparkSession, timeout: float = 60.0) -> None:
    """Until every task has ended: a failed job's other tasks may outlive it.

    Python sees no task events, so this asks the JVM's status tracker, after
    draining the listener bus that feeds it.
    """
    context = spark.sparkContext._jsc.sc()
    deadline = time.monotonic() + timeout
    while True:
        context.listenerBus().waitUntilEmpty()
        if not any(e.numRunningTasks() for e in context.statusTracker().getExecutorInfos()):
            return
        if time.monotonic() > deadline:
            raise AssertionError("Spark tasks still running after the failed job")
        time.sleep(0.05)


def test_write_refuses_unknown_columns_and_overwrite(
    spark: SparkSession, db: sluice.Database, url: str
) -> None:
    writer = spark.createDataFrame([("{}", 1)], "body STRING, colour INT").write.format("sluice")
    with pytest.raises(Exception, match="colour are not message fields"):
        writer.option("url", url).option("queue", "out").mode("append").save()
    ok = spark.createDataFrame([("{}",)], "body STRING").write.format("sluice")
    with pytest.raises(Exception, match="only appends"):
        ok.option("url", url).option("queue", "out").mode("overwrite").save()
    with pytest.raises(Exception, match="does not exist"):
        ok.option("url", url).option("queue", "nope").mode("append").save()
    assert len(db.queue("out")) == 0


# --- streaming -----------------------------------------------------------------------------


def test_stream_moves_each_message_once_within_the_batch_limit(
    spark: SparkSession, db: sluice.Database, url: str, tmp_path: Path
) -> None:
    db.queue("orders").put_many([{"n": n} for n in range(95)])
    query = _stream(spark, url, tmp_path / "ck", max_per_batch="20")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [20, 20, 20, 20, 15]
    assert sorted(b["n"] for b in _bodies(db, "out")) == list(range(95))
    assert len(db.queue("orders")) == 0
    assert db.queue("orders").stats()["claimed"] == 0  # the last batch was acknowledged too


def test_stream_with_selector_leaves_the_rest(
    spark: SparkSession, db: sluice.Database, url: str, tmp_path: Path
) -> None:
    db.queue("orders").put_many([{"n": n} for n in range(10)])
    _stream(spark, url, tmp_path / "ck", where="body.n IN (0, 2, 4, 6, 8)")
    assert sorted(b["n"] for b in _bodies(db, "out")) == [0, 2, 4, 6, 8]
    assert sorted(b["n"] for b in _bodies(db, "orders")) == [1, 3, 5, 7, 9]


def test_stream_of_an_ordered_queue_takes_lanes_whole(
    spark: SparkSession, db: sluice.Database, url: str, tmp_path: Path
) -> None:
    """Lanes need the engine's claim (a lane's next message only for its holder)."""
    db.alter_queue("orders", isolation="ordered")
    for g in range(3):
        db.queue("orders").put_many([{"g": g, "n": n} for n in range(10)], group=f"g{g}")
    query = _stream(spark, url, tmp_path / "ck", max_per_batch="7")
    assert sum(p["numInputRows"] for p in query.recentProgress) == 30
    assert sorted((b["g"], b["n"]) for b in _bodies(db, "out")) == [
        (g, n) for g in range(3) for n in range(10)
    ]
    assert not any(db.queue("orders").stats().values())


def test_empty_queue_then_messages_later(
    spark: SparkSession, db: sluice.Database, url: str, tmp_path: Path
) -> None:
    query = _stream(spark, url, tmp_path / "ck")
    assert all(p["numInputRows"] == 0 for p in query.recentProgress)
    db.queue("orders").put_many([{"n": n} for n in range(5)], priority=2)
    _stream(spark, url, tmp_path / "ck")
    assert sorted(b["n"] for b in _bodies(db, "out")) == list(range(5))
    assert {m.priority for m in db.queue("out").browse()} == {2}
    assert len(db.queue("orders")) == 0


def test_held_rounds_survive_a_new_checkpoint_and_drop_stream(
    spark: SparkSession, db: sluice.Database, url: str, tmp_path: Path
) -> None:
    """A stream's claimed but unacknowledged messages are replayed to its next query."""
    db.queue("orders").put_many([{"n": n} for n in range(6)])
    reader = (
        spark.readStream.format("sluice")
        .option("url", url)
        .option("queue", "orders")
        .option("name", "held")
        .option("max_per_batch", "4")
    )
    query = (
        reader.load()
        .writeStream.format("memory")
        .queryName("held_rows")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    # The memory sink has everything; the final batch stays held until acknowledged.
    assert spark.table("held_rows").count() == 6
    assert db.queue("orders").stats()["claimed"] in (0, 2)
    assert drop_stream(url, "orders", "held") is True
    assert drop_stream(url, "orders", "held") is False
    assert db.queue("orders").stats()["claimed"] == 0


def test_streaming_write_needs_a_name(
    spark: SparkSession, db: sluice.Database, url: str, tmp_path: Path
) -> None:
    stream = spark.readStream.format("rate").load().selectExpr("to_json(struct(value)) AS body")
    with pytest.raises(Exception, match="needs option name"):
        query = (
            stream.writeStream.format("sluice")
            .option("url", url)
            .option("queue", "out")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start()
        )
        query.awaitTermination(60)
        query.stop()
