"""Streaming reads by position: a subscription, and a queue read with option exclusive.

A position stream's micro-batch is an id range of the topic (or queue) that holds
still once read; acknowledging it moves the queue's pointer (and, for an exclusive
queue, deletes the range). These tests drive Spark queries on one shared session and,
for replays, the source's driver-side calls directly, as Spark makes them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadMaxRows
from pyspark.sql.types import StructType

import sluice
from sluice.backends.stream_positions import span_end
from sluice.spark import drop_stream
from sluice.spark.rows import message_ddl
from sluice.spark.source import SluiceDataSource

pytestmark = pytest.mark.usefixtures("spark")


@pytest.fixture
def url(shared_url: str) -> str:
    return shared_url


@pytest.fixture
def db(url: str) -> Iterator[sluice.Database]:
    with sluice.connect(url) as database:
        database.create_topic("news")
        database.subscribe("news", "evens", where="body.kind = 'even'", start="first")
        database.create_queue("out")
        yield database


def _stream(
    spark: SparkSession, url: str, checkpoint: Path, queue: str, name: str, **options: str
) -> Any:
    """Stream ``queue`` into ``out`` (sluice's sink) until what is there now is read."""
    reader = (
        spark.readStream.format("sluice")
        .option("url", url)
        .option("queue", queue)
        .option("name", name)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .selectExpr("body", "'out' AS queue")
        .writeStream.format("sluice")
        .option("url", url)
        .option("name", name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return query


def _orders(first: int, last: int | None = None) -> list[dict[str, Any]]:
    """Messages n in range(first, last), each "even" or "odd" (what the subscription takes)."""
    numbers = range(first) if last is None else range(first, last)
    return [{"n": n, "kind": "odd" if n % 2 else "even"} for n in numbers]


def _numbers(db: sluice.Database, queue: str = "out") -> list[int]:
    return sorted(m.body["n"] for m in db.queue(queue).browse(limit=100_000))


def _subscription(db: sluice.Database, name: str) -> Any:
    (found,) = [s for s in db.subscriptions() if s.name == name]
    return found


def _forget_last_commit(checkpoint: Path) -> int:
    """Crash between the sink's publish and Spark's commit log: the last batch replays."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_a_subscription_streams_by_position_exactly_once_across_restarts(
    spark: SparkSession, db: sluice.Database, url: str, tmp_path: Path
) -> None:
    news = db.queue("news")
    news.put_many(_orders(20))
    checkpoint = tmp_path / "ck"
    query = _stream(spark, url, checkpoint, "evens", "evens-reader", max_per_batch="3")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [3, 3, 3, 1]  # the selector's ten, three at a time
    assert _numbers(db) == list(range(0, 20, 2))
    # Read by position: nothing was copied into the subscription, its pointer moved on.
    assert not any(db.queue("evens").stats().values())
    assert _subscription(db, "evens").lag == 0

    # The driver dies after the sink published batch 3, before Spark logged its commit:
    # the restart replays batch 3 with the same rows, and publishes nothing twice.
    assert _forget_last_commit(checkpoint) == 3
    news.put_many(_orders(20, 30))
    query = _stream(spark, url, checkpoint, "evens", "evens-reader", max_per_batch="3")
    assert _numbers(db) == list(range(0, 30, 2))
    assert _subscription(db, "evens").lag == 0
    # Every subscription has passed the topic's messages: collection takes them all.
    while db.backend.collect("news"):
        pass
    # All collected, but for the topic's newest message, kept as done (its tombstone).
    assert not any(n for state, n in news.stats().items() if state != "done")


@pytest.mark.parametrize("queue", ["evens", "orders"])
def test_a_replayed_batch_reads_the_same_rows(
    spark: SparkSession, db: sluice.Database, url: str, queue: str
) -> None:
    """A subscription, and a queue read with exclusive=true and the same where."""
    options = {"url": url, "queue": queue, "name": "replay", "max_per_batch": "100"}
    if queue == "orders":
        db.create_queue("orders")
        options |= {"exclusive": "true", "where": "body.kind = 'even'"}
    news = db.queue("news" if queue == "evens" else "orders")
    news.put_many(_orders(6), ttl=3600)
    news.put({"n": 100, "kind": "even"}, delay=3600)  # not due: the range stops before it
    news.put_many(_orders(6, 10))
    first = _reader(options)
    start = first.initialOffset()
    end = first.latestOffset(start, ReadMaxRows(100))
    rows = _read(first, start, end)
    assert [json.loads(r["body"])["n"] for r in rows] == [0, 2, 4]

    # Before the batch is committed, the topic changes: more messages, and one of the
    # batch's expires. The restarted query's replay of (start, end] reads the same rows.
    news.put_many(_orders(10, 14))
    with sluice.connect(url, clock=sluice.ManualClock(time.time() + 7200)) as later:
        later.recover()  # expires {"n": 0..5}
    assert news.stats()["expired"] == 6
    again = _reader(options)
    assert _read(again, start, end) == rows
    again.commit(end)
    if queue == "evens":
        assert _subscription(db, "evens").position == end["position"]
    else:  # what the range read went (expired since or not); the rest stays
        assert _numbers(db, "orders") == list(range(6, 14))
        assert (news.stats()["expired"], news.stats()["delayed"]) == (3, 1)  # 1, 3, 5; 100
    # The delayed message holds back those behind it until it is due.
    assert again.latestOffset(end, ReadMaxRows(100)) == end


def test_a_subscriptions_pulled_rows_are_drained_first_and_only_once(
    spark: SparkSession, db: sluice.Database, url: str, tmp_path: Path
) -> None:
    news = db.queue("news")
    news.put_many(_orders(10))
    with db.transaction() as tx:  # an ordinary consumer pulled them all, and took one
        assert [m.body["n"] for m in tx.dequeue("evens", limit=1)] == [0]
    assert db.queue("evens").stats()["ready"] == 4
    news.put_many(_orders(10, 16))
    _stream(spark, url, tmp_path / "ck", "evens", "drain", max_per_batch="2")
    assert _numbers(db) == list(range(2, 16, 2))
    assert not any(db.queue("evens").stats().values())


def test_a_subscription_read_by_another_consumer_stops_the_stream(
    spark: SparkSession, db: sluice.Database, url: str
) -> None:
    db.queue("news").put_many(_orders(4))
    options = {"url": url, "queue": "evens", "name": "shared"}
    reader = _reader(options)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(10))
    reader.commit(end)
    db.queue("news").put_many(_orders(4, 8))
    with db.transaction() as tx:  # another consumer pulls: the pointer moves on
        tx.dequeue("evens", limit=1)
    with pytest.raises(sluice.QueueInUse, match="only consumer"):
        reader.latestOffset(end, ReadMaxRows(10))


def test_exclusive_queue_reads_by_range_and_deletes_at_commit(
    spark: SparkSession, db: sluice.Database, url: str, tmp_path: Path
) -> None:
    db.create_queue("orders")
    orders = db.queue("orders")
    orders.put_many(_orders(25))
    checkpoint = tmp_path / "ck"

    def run(**options: str) -> list[int]:
        query = _stream(spark, url, checkpoint, "orders", "excl", exclusive="true", **options)
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    assert run(max_per_batch="10", where="body.n != 7") == [10, 10, 4]
    assert _numbers(db) == [n for n in range(25) if n != 7]
    assert _numbers(db, "orders") == [7]  # what the where leaves stays
    orders.put_many(_orders(25, 30))
    # A message another consumer holds while the stream passes it, and then gives back,
    # is behind the stream's position: the next run takes it by a round, once.
    with db.transaction() as tx:
        assert [m.body["n"] for m in tx.dequeue("orders", where="body.n = 26")] == [26]
        assert run(where="body.n != 7") == [4]
        tx.abort()
    assert run(where="body.n != 7") == [1]
    assert _numbers(db) == [n for n in range(30) if n != 7]
    assert _numbers(db, "orders") == [7]
    assert run() == [1]  # a wider where: what it takes now lies behind the position
    assert not any(orders.stats().values())
    assert drop_stream(url, "orders", "excl") is True


def test_a_position_read_refuses_what_it_cannot_do(db: sluice.Database, url: str) -> None:
    db.create_queue("lanes", isolation="ordered")
    with pytest.raises(sluice.ConfigurationError, match="isolation"):
        _reader({"url": url, "queue": "lanes", "name": "x", "exclusive": "true"})
    with pytest.raises(sluice.ConfigurationError, match="is a topic"):
        _reader({"url": url, "queue": "news", "name": "x"})
    with pytest.raises(sluice.ConfigurationError, match="exclusive must be true or false"):
        _reader({"url": url, "queue": "evens", "name": "x", "exclusive": "yes"})


def test_a_subscription_can_still_compete_by_rounds(
    spark: SparkSession, db: sluice.Database, url: str, tmp_path: Path
) -> None:
    """exclusive=false: the stream is one consumer among others, taking by rounds."""
    db.queue("news").put_many(_orders(12))
    _stream(spark, url, tmp_path / "ck", "evens", "rounds", exclusive="false", max_per_batch="4")
    assert _numbers(db) == list(range(0, 12, 2))
    assert not any(db.queue("evens").stats().values())


# --- the source's driver-side calls, as Spark makes them ----------------------------------


def _reader(options: dict[str, str]) -> Any:
    source = SluiceDataSource(options)
    schema = cast(StructType, StructType.fromDDL(message_ddl(None)))
    return source.streamReader(schema)


def _read(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for partition in reader.partitions(start, end):
        for batch in reader.read(partition):
            rows += batch.to_pylist()
    return sorted(rows, key=lambda r: r["id"])


# --- where a range ends ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "late", "limit", "expected"),
    [
        (range(101, 201), (), 30, (130, 30)),  # dense: one window of 30 ids
        (range(101, 201), (), 500, (200, 100)),  # fewer than the limit: up to the last
        (range(100, 400, 3), (), 20, (157, 20)),  # one id in three: wider windows, then cut
        (range(1, 100_000, 1000), (), 9, (8001, 9)),  # one in a thousand
        (range(101, 201), (115,), 30, (114, 14)),  # not due yet: the range stops before it
        (range(101, 201), (101,), 30, (100, 0)),  # the first is not due: nothing yet
        (range(100, 400, 3), (157,), 40, (156, 19)),  # ... found in a window that was cut
        ((), (), 30, (0, 0)),  # nothing past the position
    ],
)
def test_a_range_ends_at_its_limit_or_before_a_message_not_due(
    ids: range | tuple[int, ...], late: tuple[int, ...], limit: int, expected: tuple[int, int]
) -> None:
    """``span_end`` walks windows of ids; the range holds the limit at most, none not due."""
    present = sorted(ids)
    after = present[0] - 1 if present else 0

    def window(a: int, b: int) -> tuple[int, int | None, int | None]:
        inside = [i for i in present if a < i <= b]
        lates = [i for i in inside if i in late]
        return len(inside), max(inside, default=None), min(lates, default=None)

    def nth(a: int, b: int, n: int) -> int:
        return [i for i in present if a < i <= b][n - 1]

    ends = (present[0], present[-1]) if present else (None, None)
    end, found = span_end(after, limit, ends, window, nth)
    held = [i for i in present if after < i <= end]
    assert (end, len(held)) == expected
    assert found >= len(held)  # counted up to a message not due, and past it
    assert not [i for i in late if i <= end]
