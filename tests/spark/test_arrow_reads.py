"""PostgreSQL reads a position range into Arrow columns (ADBC): the same batches as its rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

import sluice
from sluice.backends.records import Row, Selection
from sluice.errors import StorageError
from sluice.spark.rows import message_ddl, read_batches, read_table_batches
from sluice.spark.source import _ahead
from tests.conftest import url_for

pytestmark = pytest.mark.usefixtures("spark")  # StructType.fromDDL asks the JVM


@pytest.fixture
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for("postgresql", tmp_path, request)


@pytest.fixture
def db(url: str) -> Iterator[sluice.Database]:
    with sluice.connect(url) as database:
        yield database


def _schema(body_schema: str | None) -> StructType:
    return cast(StructType, StructType.fromDDL(message_ddl(body_schema)))


def _fill(db: sluice.Database, *, binary: bool, properties: bool) -> sluice.Queue:
    q = db.create_queue("orders")
    q.put_many([{"n": n, "text": f'line, "{n}"\nnext\\'} for n in range(30)], priority=2)
    q.put("plain text, é", content_type="text/plain", ttl=3600, correlation_id="c", reply_to="r")
    q.put({"n": 99}, type=None)
    q.put({"n": 100}, delay=3600)  # not due at the range's time: in neither read
    if binary:
        q.put(b"\x00\xffbytes", content_type="application/octet-stream")
    if properties:
        q.put({"n": 7}, properties={"k": "v", "num": 3})
    return q


@pytest.mark.parametrize("body_schema", [None, "n BIGINT, text STRING"])
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("properties", [False, True])
@pytest.mark.parametrize("where", [None, "body.n >= 10"])
def test_a_range_reads_the_same_in_columns_as_in_rows(
    db: sluice.Database, body_schema: str | None, binary: bool, properties: bool, where: str | None
) -> None:
    _fill(db, binary=binary, properties=properties)
    backend = db.backend
    select: Selection | None = db.selection("orders", where)
    at = db.clock.now()
    low, high, _ = backend.id_bounds("orders")
    schema = _schema(body_schema)
    for after, upto, limit in (
        (low - 1, high, 1000),
        (low - 1, high, 7),
        (low + 5, high - 3, 1000),
    ):
        rows = backend.stream_rows("orders", after, upto, at=at, limit=limit, select=select)
        table = backend.stream_table("orders", after, upto, at=at, limit=limit, select=select)
        assert table is not None
        assert table.num_rows == len(rows) > 0
        assert table.column("id").to_pylist() == [r[0] for r in rows]
        expected = pa.Table.from_batches(read_batches("orders", rows, schema), schema=None)
        got = pa.Table.from_batches(read_table_batches("orders", table, schema))
        assert got.equals(expected)


def test_an_empty_range_reads_no_batch(db: sluice.Database) -> None:
    db.create_queue("orders")
    table = db.backend.stream_table("orders", 0, 100, at=db.clock.now(), limit=10, select=None)
    assert table is not None
    assert table.num_rows == 0
    assert list(read_table_batches("orders", table, _schema(None))) == []


def test_sqlite_reads_rows(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        db.create_queue("orders").put({"n": 1})
        backend = db.backend
        assert (
            backend.stream_table("orders", 0, 100, at=db.clock.now(), limit=10, select=None) is None
        )


@pytest.mark.timeout(120)
def test_a_read_waiting_on_a_lock_lets_this_process_run(db: sluice.Database, url: str) -> None:
    """The read waits for a lock without holding the GIL, as the row reads do: the lock's
    holder may be a thread of this very process (the maintainer rotating the table)."""
    db.create_queue("orders").put_many([{"n": n} for n in range(10)])
    backend = db.backend
    conninfo, _, query = url.partition("?")
    schema = dict(p.split("=") for p in query.split("&"))["schema"]
    read: list[int] = []
    at = db.clock.now()
    with psycopg.connect(conninfo) as holder, psycopg.connect(conninfo, autocommit=True) as look:
        holder.execute(f'LOCK TABLE "{schema}".messages IN ACCESS EXCLUSIVE MODE')

        def run() -> None:
            table = backend.stream_table("orders", 0, 10**9, at=at, limit=100, select=None)
            read.append(-1 if table is None else table.num_rows)

        reader = threading.Thread(target=run)
        reader.start()
        # This loop runs only if the waiting read lets go of the GIL.
        waiting = (
            "SELECT 1 FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        while not look.execute(waiting).fetchall():
            time.sleep(0.01)
        holder.rollback()
        reader.join(60)
    assert read == [10]


def test_pages_read_ahead_come_in_order_and_errors_reach_the_reader() -> None:
    fetched: list[int] = []

    def pages(fail_at: int | None) -> Iterator[list[Row]]:
        for n in range(5):
            if n == fail_at:
                raise StorageError("the server went away")
            fetched.append(n)
            yield [(n, "row")]

    assert [p[0][0] for p in _ahead(pages(None))] == [0, 1, 2, 3, 4]
    got = []
    with pytest.raises(StorageError, match="went away"):
        for p in _ahead(pages(3)):
            got.append(p[0][0])
    assert got == [0, 1, 2]


def test_a_reader_that_stops_early_lets_the_read_ahead_go() -> None:
    gate = threading.Event()

    def pages() -> Iterator[list[Row]]:
        n = 0
        while True:  # endless: only the reader's stop ends it
            yield [(n, "row")]
            n += 1
            gate.set()

    reading = _ahead(pages())
    assert next(reading)[0][0] == 0
    gate.wait(10)
    before = {t.name for t in threading.enumerate()}
    assert "sluice-read-ahead" in before
    reading.close()
    assert not any(t.name == "sluice-read-ahead" for t in threading.enumerate())


def test_the_arrow_connection_is_named_as_the_pool_is(db: sluice.Database, url: str) -> None:
    """Operators tell sluice's sessions apart by application_name: this one too."""
    db.create_queue("orders").put({"n": 1})
    table = db.backend.stream_table("orders", 0, 10**9, at=db.clock.now(), limit=10, select=None)
    assert table is not None
    assert table.num_rows == 1
    conninfo = url.partition("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as look:
        names = look.execute(
            "SELECT application_name FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'COPY (%'"
            " AND pid <> pg_backend_pid()"
        ).fetchall()
    assert ("sluice",) in names


@pytest.mark.parametrize("where", [None, "body.n >= 10"])
def test_a_batch_read_scans_the_same_in_columns_as_in_rows(
    db: sluice.Database, where: str | None
) -> None:
    _fill(db, binary=True, properties=True)
    backend = db.backend
    select: Selection | None = db.selection("orders", where)
    low, high, _ = backend.id_bounds("orders")
    schema = _schema(None)

    def same(state: str) -> int:
        rows = backend.scan("orders", state, low - 1, high, limit=1000, select=select)
        table = backend.scan_table("orders", state, low - 1, high, limit=1000, select=select)
        assert table is not None
        assert table.column("id").to_pylist() == [r[0] for r in rows]
        if rows:
            expected = pa.Table.from_batches(read_batches("orders", rows, schema))
            assert pa.Table.from_batches(read_table_batches("orders", table, schema)).equals(
                expected
            )
        return len(rows)

    assert same("delayed") == 1  # {"n": 100}, held for an hour
    with db.transaction() as tx:
        taken = tx.dequeue("orders", limit=3)  # n = 0, 1, 2: none of them is n >= 10
        assert len(taken) == 3
        assert same("claimed") == (3 if where is None else 0)
    assert same("ready") > 0


def test_sqlite_scans_rows(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        db.create_queue("orders").put({"n": 1})
        assert db.backend.scan_table("orders", "ready", 0, 100, limit=10, select=None) is None
