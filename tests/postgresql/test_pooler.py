"""PostgreSQL through PgBouncer in transaction mode (docs/postgresql.md, "Behind a pooler"):
the failures found before sluice supported it (docs: ../shared/notes/ecosystem.md, section
5), each reproduced here; they fail on the code before it."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

import sluice
import sluice.aio
from sluice.backends.postgres_maintenance import maintenance_locks
from sluice.backends.postgres_schema import LOCK_CLASS
from sluice.urls import shown_url
from tests.conftest import current_postgres_url, drop_schema, pooled_url, schema_of
from tests.pgbouncer import POOL_SIZE, PgBouncer
from tests.postgres_server import PostgresServer


@pytest.fixture
def direct_url(postgres_server: PostgresServer | str) -> Iterator[str]:
    """A sluice URL of a fresh schema, straight to the server."""
    url = current_postgres_url(postgres_server)
    yield url
    drop_schema(url)


@pytest.fixture
def pooled(direct_url: str, pgbouncer: PgBouncer) -> str:
    """The same schema through PgBouncer, with ``direct`` for LISTEN and maintenance."""
    return pooled_url(pgbouncer, direct_url)


@pytest.fixture
def undirected(direct_url: str, pgbouncer: PgBouncer) -> str:
    """The same schema through PgBouncer, and no direct URL."""
    base, _, query = direct_url.partition("?")
    return f"{pgbouncer.url_for(base)}?{query}&pooler=transaction"


def test_eight_threads_of_put_get_ack_all_settle(pooled: str) -> None:
    """Before: 124 of 1,200 settled; the rest failed on prepared statements that another
    client's server connection did not have ("_pg3_1" does not exist)."""
    threads, cycles = 8, 150
    errors: list[BaseException] = []
    settled: list[int] = []
    with sluice.connect(pooled + "&rotate_every=100&maintenance_interval=0.05") as db:
        db.create_queue("work")
        start = threading.Barrier(threads)

        def worker(n: int) -> None:
            try:
                start.wait()
                queue = db.queue("work")
                for i in range(cycles):
                    queue.put({"worker": n, "i": i})
                    m = queue.get(wait=10)
                    assert m is not None
                    m.ack()
                    settled.append(n)
            except BaseException as exc:
                errors.append(exc)

        running = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join(120)
        assert errors == []
        assert len(settled) == threads * cycles
        assert len(db.queue("work")) == 0


_PRODUCER = """
import sys, time, sluice
with sluice.connect(sys.argv[1]) as db:
    db.queue("events").put("from another process")
    print(time.time())
"""


def test_a_wakeup_crosses_processes_through_the_pooler_with_a_direct_url(pooled: str) -> None:
    """Before: LISTEN on a pooled connection was lost, and only the fallback tick woke the
    consumer. With a fallback of a minute and a wait of 30 s, only LISTEN can wake it."""
    with sluice.connect(pooled + "&fallback=60") as consumer:
        consumer.create_queue("events")
        got: list[Any] = []
        taken = threading.Event()

        def consume() -> None:
            m = consumer.queue("events").get(wait=30)
            if m is not None:
                got.append((m.body, time.time()))
                m.ack()
            taken.set()

        thread = threading.Thread(target=consume)
        thread.start()
        _until(lambda: consumer.backend._listener is not None)  # type: ignore[attr-defined]
        assert consumer.backend._listener.connected.wait(10)  # type: ignore[attr-defined]
        producer = subprocess.run(
            [sys.executable, "-c", _PRODUCER, pooled],
            check=True,
            timeout=60,
            capture_output=True,
            text=True,
        )
        assert taken.wait(30)
        thread.join(10)
    ((body, taken_at),) = got
    assert body == "from another process"
    woke = taken_at - float(producer.stdout)
    assert woke < 2, f"woken {woke:.2f} s after the put: not by LISTEN (fallback: 60 s)"


_MAINTAINS = """
import sys, sluice
db = sluice.connect(sys.argv[1] + "&rotate_every=50&maintenance_interval=0")
db.create_queue("churn", exist_ok=True)
for round in range(4):
    db.queue("churn").put_many(list(range(60)))
    with db.transaction() as tx:
        tx.dequeue("churn", limit=60)
    db.backend.maintain()
print("rotated")
"""


def test_no_advisory_lock_outlives_the_process(
    undirected: str, direct_url: str, pgbouncer: PgBouncer
) -> None:
    """Before: maintenance's session-level advisory locks stayed held by idle PgBouncer
    server connections after the process exited, so no node could rotate or vacuum the
    schema's partitions until PgBouncer recycled them. Maintenance goes through the pooler
    here (no direct URL), as it did then."""
    run = subprocess.run(
        [sys.executable, "-c", _MAINTAINS, undirected],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "rotated" in run.stdout
    keys = [key & 0xFFFFFFFF for key in maintenance_locks(schema_of(direct_url))]
    with psycopg.connect(direct_url.partition("?")[0], autocommit=True) as admin:
        held = admin.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND classid = %s AND objid = ANY(%s)",
            (LOCK_CLASS, keys),
        ).fetchone()
    assert held == (0,)


_SETTINGS = (
    "SELECT current_setting('jit'), current_setting('enable_seqscan'), "
    "current_setting('plan_cache_mode')"
)


def test_no_session_setting_reaches_other_clients_of_the_pool(
    postgres_server: PostgresServer | str, direct_url: str
) -> None:
    """sluice's planner settings go with its transactions, sluice.aio's too: the server
    connections they used and PgBouncer hands to others keep the server's defaults."""
    pgbouncer = PgBouncer(direct_url.partition("?")[0])
    try:
        _use_and_look(pooled_url(pgbouncer, direct_url), pgbouncer, direct_url)
    finally:
        pgbouncer.stop()


def _use_and_look(pooled: str, pgbouncer: PgBouncer, direct_url: str) -> None:
    with sluice.connect(pooled) as db:
        queue = db.create_queue("q")
        topic = db.create_topic("t")
        db.subscribe("t", "s")
        for i in range(20):
            queue.put(i)
            m = queue.get()
            assert m is not None
            m.ack()
            topic.put(i)  # kept up with: pulled and claimed in one call from the second on
            m = db.queue("s").get()
            assert m is not None
            assert m.body == i
            m.ack()

    async def use_aio() -> None:
        async with sluice.aio.connect(pooled) as adb:
            aqueue = await adb.create_queue("aq")
            for i in range(20):
                await aqueue.put(i)
                am = await aqueue.get()
                assert am is not None
                await am.ack()
            async with adb.transaction() as tx:
                await tx.enqueue("aq", "in a transaction")
            assert (await aqueue.stats())["ready"] == 1

    asyncio.run(use_aio())
    base = pgbouncer.url_for(direct_url.partition("?")[0])
    clients = [psycopg.connect(base, prepare_threshold=None) for _ in range(POOL_SIZE)]
    try:
        # Each in its own open transaction: POOL_SIZE server connections at once, all of them.
        seen = {c.execute(_SETTINGS).fetchone() for c in clients}
    finally:
        for c in clients:
            c.close()
    assert seen == {("on", "on", "auto")}


def test_without_a_direct_url_a_warning_once_and_the_fallback_wakes(
    undirected: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sluice.postgres")
    url = undirected + "&fallback=0.1"
    with sluice.connect(url) as consumer, sluice.connect(url) as producer:
        consumer.create_queue("events")
        warnings = [r for r in caplog.records if "no direct= URL" in r.getMessage()]
        assert len(warnings) == 1  # two Databases, one warning
        assert "direct=postgresql://" in warnings[0].getMessage()
        taken = threading.Event()
        got: list[Any] = []

        def consume() -> None:
            m = consumer.queue("events").get(wait=30)
            got.append(None if m is None else m.body)
            taken.set()

        thread = threading.Thread(target=consume)
        thread.start()
        producer.queue("events").put("polled")
        assert taken.wait(30)
        thread.join(10)
    assert got == ["polled"]


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("pooler=session", "pooler=transaction"),
        ("direct=postgresql://h/db", "declare the pooler"),
        ("pooler=transaction&direct=mysql://h/db", "postgresql:// URL"),
        ("pooler=transaction&prepare_threshold=sometimes", "prepare_threshold"),
    ],
)
def test_pooler_options_are_checked(query: str, error: str) -> None:
    with pytest.raises(sluice.ConfigurationError, match=error):
        sluice.connect(f"postgresql://nobody@127.0.0.1:1/db?{query}")


def test_prepared_statements_are_off_behind_a_pooler_unless_asked(
    pooled: str, direct_url: str
) -> None:
    """PgBouncer 1.18 has no prepared statements (1.21 has them with max_prepared_statements)."""
    with sluice.connect(pooled) as db:
        assert db.backend.connect_kwargs["prepare_threshold"] is None  # type: ignore[attr-defined]
    with sluice.connect(direct_url) as db:
        assert db.backend.connect_kwargs["prepare_threshold"] == 5  # type: ignore[attr-defined]
    with sluice.connect(direct_url + "&prepare_threshold=none") as db:
        assert db.backend.connect_kwargs["prepare_threshold"] is None  # type: ignore[attr-defined]


def test_a_password_in_the_direct_url_is_not_shown() -> None:
    direct = quote("postgresql://sluice:s3cret@db:5432/app?sslmode=require", safe="")
    shown = shown_url(f"postgresql://sluice:pw@pooler:6432/app?pooler=transaction&direct={direct}")
    assert "s3cret" not in shown
    assert "pw@" not in shown
    assert "sluice:***@db:5432" in shown


def _until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)  # another thread's state, with no event to wait on
