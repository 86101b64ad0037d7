"""PostgreSQL moves a stream's round into a spool: its Arrow path gives the rows' batches."""

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
from sluice.spark.rows import message_ddl, table_batches, to_batches
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


@pytest.mark.parametrize("body_schema", [None, "n BIGINT, text STRING"])
@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("properties", [False, True])
def test_a_spooled_round_reads_as_its_rows(
    db: sluice.Database, body_schema: str | None, binary: bool, properties: bool
) -> None:
    q = db.create_queue("orders")
    q.put_many([{"n": n, "text": f'line, "{n}"\nnext'} for n in range(20)], priority=2)
    q.put("plain text", content_type="text/plain", ttl=3600, correlation_id="c", reply_to="r")
    q.put({"n": 99}, type=None, delay=0)
    if binary:
        q.put(b"\x00\xffbytes", content_type="application/octet-stream")
    if properties:
        q.put({"n": 7}, properties={"k": "v", "num": 3})
    backend = db.backend
    stream = backend.open_stream("orders", "s")
    taken = backend.stream_claim(stream.session, 1, "orders", 100, None)
    backend.set_stream_round(stream.session, 1)
    schema = _schema(body_schema)
    for part in range(2):
        rows = backend.stream_held(stream.session, "orders", 0, 1, part=part, parts=2)
        tables = backend.stream_spooled(stream.session, 0, 1, part=part, parts=2)
        assert sum(t.num_rows for t in tables) == len(rows) > 0
        expected = pa.Table.from_batches(to_batches("orders", rows, schema))
        got = pa.Table.from_batches([b for t in tables for b in table_batches("orders", t, schema)])
        key = [("id", "ascending")]
        assert got.sort_by(key).equals(expected.sort_by(key))
    assert taken == 22 + binary + properties


@pytest.mark.timeout(120)
def test_a_take_waiting_on_a_lock_lets_this_process_release_it(
    db: sluice.Database, url: str
) -> None:
    """The move waits for locks without holding the GIL.

    Blocking inside libpq would stop every thread of the process, among them the one
    holding the lock (the maintainer, in the benchmark where this hung).
    """
    q = db.create_queue("orders")
    q.put_many([{"n": n} for n in range(10)])
    backend = db.backend
    stream = backend.open_stream("orders", "s")
    conninfo, _, query = url.partition("?")
    schema = dict(p.split("=") for p in query.split("&"))["schema"]
    taken: list[int] = []
    with psycopg.connect(conninfo) as holder, psycopg.connect(conninfo, autocommit=True) as look:
        holder.execute(f'LOCK TABLE "{schema}".messages IN ACCESS EXCLUSIVE MODE')
        claimer = threading.Thread(
            target=lambda: taken.append(
                backend.stream_claim(stream.session, 1, "orders", 100, None)
            )
        )
        claimer.start()
        # This loop runs only if the waiting claim lets go of the GIL.
        waiting = (
            "SELECT 1 FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        while not look.execute(waiting).fetchall():
            time.sleep(0.01)
        holder.rollback()
        claimer.join(60)
    assert taken == [10]
