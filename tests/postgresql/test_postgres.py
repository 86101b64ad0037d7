"""What only the PostgreSQL backend has: its schema, the outbox, commit order, NOTIFY, leases."""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import sluice
from sluice import sql
from sluice.backends.postgres_maintenance import maintenance_locks
from sluice.backends.postgres_schema import LOCK_CLASS, quote_schema, recovery_lock
from tests.conftest import (
    current_postgres_url,
    drop_schema,
    fresh_postgres_url,
    postgres_base_url,
    schema_of,
)
from tests.postgres_server import PostgresServer


@pytest.fixture
def pg_url(postgres_server: PostgresServer | str) -> Iterator[str]:
    url = current_postgres_url(postgres_server)
    yield url
    drop_schema(url)


@pytest.fixture
def empty_pg_url(postgres_server: PostgresServer | str) -> Iterator[str]:
    """A schema sluice has not created yet."""
    url = fresh_postgres_url(postgres_server)
    yield url
    drop_schema(url)


@pytest.fixture
def admin(postgres_server: PostgresServer | str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_base_url(postgres_server), autocommit=True) as conn:
        yield conn


def _schema(url: str) -> str:
    return url.rsplit("schema=", 1)[1]


def test_a_newer_schema_is_refused(pg_url: str, admin: psycopg.Connection[Any]) -> None:
    with sluice.connect(pg_url):
        pass
    admin.execute(f"UPDATE {_schema(pg_url)}.schema_version SET version = 999")
    with pytest.raises(sluice.SchemaTooNew, match="newer than this sluice"):
        sluice.connect(pg_url)


def test_an_older_schema_is_upgraded_only_when_allowed(
    pg_url: str, admin: psycopg.Connection[Any]
) -> None:
    with sluice.connect(pg_url):
        pass
    schema = _schema(pg_url)
    admin.execute(f"UPDATE {schema}.schema_version SET version = 0")
    with pytest.raises(sluice.SchemaTooOld, match="sluice db upgrade"):
        sluice.connect(pg_url + "&migrate=false")


def test_sluice_db_upgrade_reports_versions(empty_pg_url: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "db", "upgrade", "--db", empty_pg_url],
        capture_output=True,
        text=True,
        check=True,
    )
    latest = sql.migrations("postgresql")[-1][0]
    assert f"from version 0 to {latest}" in run.stdout
    run = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "db", "version", "--db", empty_pg_url],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.strip() == f"{latest} (this sluice: {latest})"


def test_missing_driver_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import sluice\n"
        "try:\n"
        "    sluice.connect('postgresql://127.0.0.1/test')\n"
        "except sluice.ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'sluice-queue[postgres]'" in out.stdout


# --- the transactional outbox --------------------------------------------------------
@pytest.fixture
def pg_db(pg_url: str) -> Iterator[sluice.Database]:
    with sluice.connect(pg_url) as db:
        db.create_queue("events")
        yield db


@pytest.fixture
def business(
    pg_url: str, postgres_server: PostgresServer | str
) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_base_url(postgres_server)) as conn:
        schema = _schema(pg_url)
        conn.execute(f"CREATE TABLE {schema}.orders (id int PRIMARY KEY)")
        conn.commit()
        yield conn


def _orders(db_url: str, conn: psycopg.Connection[Any]) -> list[int]:
    return [r[0] for r in conn.execute(f"SELECT id FROM {_schema(db_url)}.orders ORDER BY id")]


def test_outbox_commits_the_row_and_the_message_together(
    pg_db: sluice.Database, business: psycopg.Connection[Any], pg_url: str
) -> None:
    business.execute(f"INSERT INTO {_schema(pg_url)}.orders VALUES (1)")
    with pg_db.transaction(connection=business) as tx:
        tx.enqueue("events", {"order": 1})
    # The queue transaction is done, the caller's is not: nobody sees the message yet.
    assert pg_db.queue("events").browse() == []
    business.commit()
    assert [m.body for m in pg_db.queue("events").browse()] == [{"order": 1}]


def test_outbox_rollback_loses_the_row_and_the_message(
    pg_db: sluice.Database, business: psycopg.Connection[Any], pg_url: str
) -> None:
    business.execute(f"INSERT INTO {_schema(pg_url)}.orders VALUES (2)")
    with pg_db.transaction(connection=business) as tx:
        tx.enqueue("events", {"order": 2})
    business.rollback()
    assert pg_db.queue("events").browse() == []
    assert _orders(pg_url, business) == []


def test_outbox_dequeue_is_undone_by_the_callers_rollback(
    pg_db: sluice.Database, business: psycopg.Connection[Any], pg_url: str
) -> None:
    pg_db.queue("events").put({"order": 3})
    with pg_db.transaction(connection=business) as tx:
        (m,) = tx.dequeue("events")
        business.execute(f"INSERT INTO {_schema(pg_url)}.orders VALUES (%s)", (m.body["order"],))
    business.rollback()
    assert [m.body for m in pg_db.queue("events").browse()] == [{"order": 3}]
    with pg_db.transaction(connection=business) as tx:
        (m,) = tx.dequeue("events")
        business.execute(f"INSERT INTO {_schema(pg_url)}.orders VALUES (%s)", (m.body["order"],))
    business.commit()
    assert pg_db.queue("events").browse() == []
    assert _orders(pg_url, business) == [3]


def test_outbox_selective_dequeue_runs_in_the_callers_transaction(
    pg_db: sluice.Database, business: psycopg.Connection[Any]
) -> None:
    pg_db.queue("events").put_many([{"order": n, "region": r} for n, r in [(4, "n"), (5, "s")]])
    with pg_db.transaction(connection=business) as tx:
        (m,) = tx.dequeue("events", where="body.region = 's'", order_by=["body.order DESC"])
        assert m.body["order"] == 5
        assert [b.body["order"] for b in tx.browse("events", where="body.order > 3")] == [4]
    business.commit()
    assert [m.body["order"] for m in pg_db.queue("events").browse()] == [4]


def test_outbox_groups_and_blocks_settle_with_the_callers_transaction(
    pg_db: sluice.Database, business: psycopg.Connection[Any]
) -> None:
    pg_db.create_queue("legs", isolation="blockwise")
    with pg_db.transaction(connection=business) as tx:
        tx.enqueue_many("legs", ["debit", "credit"])
        tx.enqueue_many("events", ["e1", "e2"], group="G")
    business.commit()
    with pg_db.transaction(connection=business) as tx:
        assert [m.body for m in tx.dequeue("events")] == ["e1"]
        assert [m.body for m in tx.dequeue("legs")] == ["debit"]
        with pytest.raises(sluice.IncompleteBlock):
            tx.commit()  # the check sees the caller's own uncommitted claims
        assert [m.body for m in tx.dequeue("legs")] == ["credit"]
    # Until the caller commits, the group stays with its transaction.
    assert [m.body for m in pg_db.queue("events").browse()] == ["e1", "e2"]
    business.rollback()
    with pg_db.transaction(connection=business) as tx:
        assert [m.body for m in tx.dequeue("events", limit=5)] == ["e1", "e2"]
    business.commit()
    assert pg_db.queue("events").browse() == []


def test_outbox_wants_a_transaction_and_postgresql(
    pg_db: sluice.Database, postgres_server: PostgresServer | str, tmp_path: Any
) -> None:
    with psycopg.connect(postgres_base_url(postgres_server), autocommit=True) as conn:
        with pytest.raises(sluice.ConfigurationError, match="autocommit"):
            pg_db.transaction(connection=conn)
        with conn.transaction(), pg_db.transaction(connection=conn) as tx:
            tx.enqueue("events", "inside conn.transaction()")
    assert [m.body for m in pg_db.queue("events").browse()] == ["inside conn.transaction()"]
    with pytest.raises(sluice.ConfigurationError, match="psycopg 3 Connection"):
        pg_db.transaction(connection=object())
    with (
        sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as lite,
        pytest.raises(sluice.ConfigurationError, match="needs the PostgreSQL backend"),
    ):
        lite.transaction(connection=conn)


# --- delivery order is commit order --------------------------------------------------
def test_a_later_commit_gets_a_later_place_in_the_queue(
    pg_db: sluice.Database, business: psycopg.Connection[Any], admin: psycopg.Connection[Any]
) -> None:
    """A writes first but commits last: a reader following ids must see A after B."""
    with pg_db.transaction(connection=business) as tx:  # A: its ids drawn, commit pending
        tx.enqueue("events", "A")
    done = threading.Event()

    def writer_b() -> None:
        with pg_db.transaction() as tx:
            tx.enqueue("events", "B")
        done.set()

    thread = threading.Thread(target=writer_b)
    thread.start()
    # B must wait for A's commit lock: it cannot take an id that A's could follow.
    _await(lambda: _waiting_on_advisory_lock(admin), "B to wait for A's commit lock")
    assert not done.is_set()
    business.commit()
    thread.join(10)
    assert done.is_set()
    assert [m.body for m in pg_db.queue("events").browse()] == ["A", "B"]


def _waiting_on_advisory_lock(admin: psycopg.Connection[Any]) -> bool:
    row = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    ).fetchone()
    return bool(row and row[0])


def _await(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)  # polling another connection's state: there is no event to wait on


# --- wake-ups ----------------------------------------------------------------------
def _blocked_get(db: sluice.Database, got: list[Any]) -> threading.Thread:
    def consume() -> None:
        with db.transaction() as tx:
            got.extend(m.body for m in tx.dequeue("events", wait=30))

    thread = threading.Thread(target=consume)
    thread.start()
    return thread


def test_notify_wakes_a_consumer_of_another_connection(pg_url: str) -> None:
    # A fallback of a minute: only the notification can wake the consumer in time.
    with sluice.connect(pg_url + "&fallback=60") as consumer, sluice.connect(pg_url) as producer:
        producer.create_queue("events")
        got: list[Any] = []
        thread = _blocked_get(consumer, got)
        producer.queue("events").put("wake up")
        thread.join(10)
        assert got == ["wake up"]


def test_a_database_alone_sends_no_notifications_until_a_peer_says_hello(pg_url: str) -> None:
    with sluice.connect(pg_url + "&fallback=60") as producer:
        producer.create_queue("events")
        notifier = producer.backend._notifier  # type: ignore[attr-defined]
        assert not notifier.peers  # nobody else uses the schema: no NOTIFY is sent
        with sluice.connect(pg_url + "&fallback=60") as consumer:
            _await(lambda: notifier.peers, "the producer to hear the consumer's hello")
            got: list[Any] = []
            thread = _blocked_get(consumer, got)
            producer.queue("events").put("heard you")
            thread.join(10)
            assert got == ["heard you"]


def test_a_lost_notification_connection_is_reestablished(
    pg_url: str, admin: psycopg.Connection[Any]
) -> None:
    application = f"sluice-{schema_of(pg_url)}"  # others' listeners share the server: not theirs
    consumer_url = f"{pg_url}&fallback=60&application_name={application}"
    with sluice.connect(consumer_url) as consumer, sluice.connect(pg_url) as producer:
        producer.create_queue("events")
        listener = consumer.backend._listener  # type: ignore[attr-defined]
        assert listener.connected.wait(10)
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE (query LIKE 'LISTEN %%' OR query LIKE 'SELECT pg_notify(%%') "
            "AND application_name = %s",
            (application,),
        )
        _await(lambda: not listener.connected.is_set(), "the listener to notice")
        assert listener.connected.wait(10)
        got: list[Any] = []
        thread = _blocked_get(consumer, got)
        producer.queue("events").put("after the reconnect")
        thread.join(10)
        assert got == ["after the reconnect"]


def test_the_fallback_check_finds_work_without_any_notification(pg_url: str) -> None:
    with sluice.connect(pg_url + "&fallback=0.2") as consumer, sluice.connect(pg_url) as producer:
        producer.create_queue("events")
        # Silence the producer's notifications entirely: only the fallback is left.
        producer.backend._notifier.signal = lambda: None  # type: ignore[attr-defined]
        got: list[Any] = []
        thread = _blocked_get(consumer, got)
        producer.queue("events").put("found by looking")
        thread.join(10)
        assert got == ["found by looking"]


# --- leases across hosts -------------------------------------------------------------
def test_a_dead_host_is_rolled_back_exactly_once(
    pg_url: str, admin: psycopg.Connection[Any]
) -> None:
    schema = _schema(pg_url)
    with sluice.connect(pg_url) as a, sluice.connect(pg_url) as b:
        a.create_queue("events")
        a.queue("events").put_many(["m1", "m2"])
        tx = a.begin()
        tx.dequeue("events", limit=2)
        # Make a's session look like one on another host whose heartbeat stopped long ago.
        admin.execute(
            f"UPDATE {schema}.sessions SET host = 'elsewhere', heartbeat_at = heartbeat_at - 3600 "
            "WHERE id = %s",
            (a.session,),
        )
        found: list[list[int]] = []
        racers = [threading.Thread(target=lambda: found.append(b.recover())) for _ in range(4)]
        for r in racers:
            r.start()
        for r in racers:
            r.join()
        rolled_back = [s for f in found for s in f]
        assert rolled_back.count(a.session) <= 1
        b.recover()  # whoever lost the race sees nothing left to do
        assert [m.body for m in b.queue("events").browse()] == ["m1", "m2"]
        assert [m.attempts for m in b.queue("events").browse()] == [1, 1]
        with pytest.raises(sluice.LeaseLost):
            tx.commit()


def test_a_recovery_in_another_schema_does_not_make_this_one_skip(
    pg_url: str, admin: psycopg.Connection[Any], postgres_server: PostgresServer | str
) -> None:
    """The recovery lock is the schema's own. With one key for the database, a recovery
    running in another schema made this one's recover() skip and report nothing while a
    dead session waited (tests/reliability/test_crash.py, beside other tests' schemas)."""
    schema = _schema(pg_url)
    assert recovery_lock(schema) != recovery_lock(f"{schema}_other")
    # A lease of an hour: no heartbeat renews the dead session or recovers on its own.
    with sluice.connect(f"{pg_url}&lease=3600") as a, sluice.connect(f"{pg_url}&lease=3600") as b:
        a.create_queue("events")
        a.queue("events").put("m1")
        tx = a.begin()
        tx.dequeue("events")
        admin.execute(
            f"UPDATE {schema}.sessions SET host = 'elsewhere', heartbeat_at = heartbeat_at - 3600 "
            "WHERE id = %s",
            (a.session,),
        )
        with psycopg.connect(postgres_base_url(postgres_server)) as recovering:
            lock = "SELECT pg_advisory_xact_lock(%s, %s)"
            recovering.execute(lock, (LOCK_CLASS, recovery_lock(schema)))
            # This schema's recoverer at work: the heartbeat's pass skips (db.recover()
            # would wait for it: tests/postgresql/test_recovery_wait.py).
            assert b.context.recover(wait=False) == []
            recovering.rollback()
            recovering.execute(lock, (LOCK_CLASS, recovery_lock(f"{schema}_other")))
            assert b.recover() == [a.session]  # another schema's: not this one's business
        assert [m.attempts for m in b.queue("events").browse()] == [1]


def test_recovery_locks_are_apart_from_the_other_keys() -> None:
    keys = [recovery_lock(f"s{n}") for n in range(2_000)]
    assert len(set(keys)) == len(keys)
    lowest_maintenance = min(min(maintenance_locks(f"s{n}")) for n in range(2_000))
    assert all(-(2**31) <= k < lowest_maintenance for k in keys)  # int4, below maintenance's


def test_maintenance_vacuums_dead_rows_when_autovacuum_does_not(pg_url: str) -> None:
    with sluice.connect(pg_url + "&maintenance_interval=0") as db:
        db.create_queue("churn")
        db.queue("churn").put_many(list(range(12_000)))
        with db.transaction() as tx:
            assert len(tx.dequeue("churn", limit=12_000)) == 12_000
        backend = db.backend
        # Statistics reach the server's counters within a second or so: wait for them.
        deadline = time.monotonic() + 30
        while not backend.maintain()[1]:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the dead rows were never vacuumed"
            time.sleep(0.2)
        dead, _ = backend._one("dead_rows", {})[0]  # type: ignore[attr-defined]
        assert dead < 1_000


def test_maintenance_analyzes_the_current_partition_as_it_grows(
    pg_url: str, admin: psycopg.Connection[Any]
) -> None:
    """A partition made current has no statistics; generic plans made from them would
    scan it whole for as long as they live. Maintenance analyzes it once it holds rows,
    and again when it has grown well past what the planner believes."""
    schema = _schema(pg_url)

    def believed() -> float:
        row = admin.execute(
            f"SELECT reltuples FROM pg_class WHERE oid = '{schema}.messages_0'::regclass"
        ).fetchone()
        assert row is not None
        return float(row[0])

    def analyzed_past(rows: int) -> None:
        # The live-row counts reach the server's statistics within a second or so.
        deadline = time.monotonic() + 30
        while believed() < rows:
            assert time.monotonic() < deadline, f"never analyzed past {rows} rows"
            db.backend.maintain(vacuum_too=False)  # type: ignore[attr-defined]
            time.sleep(0.2)

    with sluice.connect(pg_url + "&rotate_every=1000000&maintenance_interval=0") as db:
        db.create_queue("backlog")
        db.queue("backlog").put_many(list(range(500)))
        db.backend.maintain(vacuum_too=False)  # type: ignore[attr-defined]
        assert believed() <= 0  # too few rows to be worth an ANALYZE
        db.queue("backlog").put_many(list(range(1_500)))
        analyzed_past(2_000)
        db.queue("backlog").put_many(list(range(2_000)))
        db.backend.maintain(vacuum_too=False)  # type: ignore[attr-defined]
        assert believed() == 2_000  # 4,000 rows: not yet far enough past 2,000
        db.queue("backlog").put_many(list(range(6_000)))
        analyzed_past(10_000)


def test_failed_maintenance_keeps_no_lock(pg_url: str, admin: psycopg.Connection[Any]) -> None:
    """Maintenance that fails (here: its schema was dropped) releases its session lock.

    A leaked lock once blocked every other schema's queue with the same key.
    """
    db = sluice.connect(pg_url + "&maintenance_interval=0")
    db.create_queue("q")
    admin.execute(f"DROP SCHEMA {quote_schema(_schema(pg_url))} CASCADE")
    with pytest.raises(sluice.StorageError):
        db.backend.maintain()  # type: ignore[attr-defined]
    held = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
    ).fetchone()
    assert held == (0,)
    with contextlib.suppress(sluice.StorageError):  # its session row went with the schema
        db.close()


def _partition_sizes(admin: psycopg.Connection[Any], schema: str) -> list[int]:
    return [
        admin.execute(f"SELECT count(*) FROM {schema}.messages_{n}").fetchone()[0]  # type: ignore[index]
        for n in range(4)
    ]


def test_rotation_keeps_every_message_in_its_place(
    pg_url: str, admin: psycopg.Connection[Any]
) -> None:
    schema = _schema(pg_url)
    with sluice.connect(pg_url + "&rotate_every=1&maintenance_interval=0") as db:
        db.create_queue("work", max_attempts=1)
        q = db.queue("work")
        q.put_many(["a", "b", "c"])
        q.put("later", delay=3600)
        q.put("urgent", priority=9)
        holder = db.begin()
        (held,) = holder.dequeue("work")  # "urgent", claimed by an open transaction
        holder.enqueue("work", "own")
        holder.browse("work")  # written as a pending row
        failed = db.begin()
        (doomed,) = failed.dequeue("work")  # "a": out of attempts when released
        failed.release(doomed)
        failed.commit()
        before = {s: [m.body for m in q.browse(state=s)] for s in ("ready", "delayed", "failed")}
        assert before == {"ready": ["b", "c"], "delayed": ["later"], "failed": ["a"]}
        made_current = []
        for n in range(5):  # more than a full turn: every partition is emptied once
            q.put(f"filler-{n}")
            rotated, _ = db.backend.maintain()  # type: ignore[attr-defined]
            made_current.append(rotated)
        assert made_current == [1, 2, 3, 0, 1]
        # Everything began in partition 0, which has been emptied and reused since.
        first = {r[0] for r in admin.execute(f"SELECT body FROM {schema}.messages_0")}
        assert not first & {"a", "b", "c", "later", "urgent", "own"}
        assert [m.body for m in q.browse(state="delayed")] == ["later"]
        assert [m.body for m in q.browse(state="failed")] == ["a"]
        ready = [m.body for m in q.browse(limit=100)]
        assert ready == ["b", "c"] + [f"filler-{n}" for n in range(5)]
        # The open transaction never noticed: its claim and its pending row commit.
        assert held.body == "urgent"
        holder.commit()
        assert [m.body for m in q.browse(limit=100)][-1] == "own"
        assert q.stats()["claimed"] == 0


def _partition_bytes(admin: psycopg.Connection[Any], schema: str) -> list[int]:
    return [
        admin.execute(f"SELECT pg_relation_size('{schema}.messages_{n}')").fetchone()[0]  # type: ignore[index]
        for n in range(4)
    ]


def test_a_long_transaction_elsewhere_does_not_stop_rotation(
    pg_url: str, postgres_server: PostgresServer | str, admin: psycopg.Connection[Any]
) -> None:
    schema = _schema(pg_url)
    with (
        sluice.connect(pg_url + "&rotate_every=100&maintenance_interval=0") as db,
        psycopg.connect(postgres_base_url(postgres_server)) as long_tx,
    ):
        long_tx.execute("SELECT txid_current()")  # holds back the xmin horizon from here on
        db.create_queue("churn")
        one_round = 0
        for n in range(8):
            db.queue("churn").put_many(list(range(200)))
            with db.transaction() as tx:
                tx.dequeue("churn", limit=200)
            if n == 0:
                one_round = sum(_partition_bytes(admin, schema))
            rotated, _ = db.backend.maintain(vacuum_too=False)  # type: ignore[attr-defined]
            assert rotated is not None
        # VACUUM could free nothing under the open transaction; TRUNCATE did: eight
        # rounds of churn occupy the space of at most four.
        assert _partition_sizes(admin, schema) == [0, 0, 0, 0]
        sizes = _partition_bytes(admin, schema)
        assert sizes[rotated] == 0
        assert sum(sizes) <= 4 * one_round
        long_tx.rollback()


def test_transient_queues_commit_without_waiting_for_the_flush(
    pg_url: str, postgres_server: PostgresServer | str
) -> None:
    from sluice.backends.base import CommitPlan, Envelope
    from sluice.backends.postgres_statements import commit_statements

    with sluice.connect(pg_url) as db:
        db.create_queue("metrics", durability="transient")
        db.create_queue("orders")
        envelope = Envelope("metrics", 1, 0, "1", "text/plain", None, None, None, 0.0, 0.0, None)
        # The enqueue function relaxes the commit it runs in only when told to.
        for durable, expected in ((False, "off"), (True, "on")):
            name, params = commit_statements(
                CommitPlan(session=db.session, tx=99, enqueues=[envelope], durable=durable)
            )[0]
            with psycopg.connect(postgres_base_url(postgres_server)) as conn:
                conn.execute(db.backend.statements[name], params)  # type: ignore[attr-defined]
                assert conn.execute("SHOW synchronous_commit").fetchone() == (expected,)
                conn.rollback()
        # And a transaction's durability follows its queues: transient alone, or not.
        with db.transaction() as tx:
            tx.enqueue("metrics", 1)
            assert not tx._durable
        with db.transaction() as tx:
            tx.enqueue("metrics", 2)
            tx.enqueue("orders", 3)
            assert tx._durable


def test_a_body_jsonb_cannot_hold_is_refused_at_enqueue_and_the_rest_routed(pg_url: str) -> None:
    """jsonb refuses the NUL escape that json text may hold: such a body once stored made
    every selector read of its queue fail (and a rules batch fall back to Python), so it
    is refused when put, and nothing of that put is stored."""
    with sluice.connect(pg_url) as db:
        db.apply(
            """
            CREATE QUEUE orders ERRORQUEUE bad;
            CREATE QUEUE bad;
            CREATE QUEUE billing;
            CREATE RULE route FOR orders IF true THEN
              ENQUEUE json_object('order', body.id) INTO billing;
            """
        )
        with pytest.raises(sluice.InvalidBody, match="NUL"):
            db.queue("orders").put_many([{"id": "a"}, {"id": "b\u0000c"}, {"id": "d"}])
        assert db.queue("orders").stats()["ready"] == 0
        db.queue("orders").put_many([{"id": "a"}, {"id": "d"}])
        stats = db.rules.run_until_idle()
        assert (stats.processed, stats.errors) == (2, 0)
        assert [m.body for m in db.queue("billing").browse()] == [{"order": "a"}, {"order": "d"}]
        assert db.queue("bad").browse() == []


def test_an_expression_that_overflows_on_a_message_says_so(pg_url: str) -> None:
    """PostgreSQL's double precision raises where SQLite's gives infinity: a clear error,
    and the message is still there for a selection that does not overflow."""
    with sluice.connect(pg_url) as db:
        db.create_queue("q")
        db.queue("q").put({"n": 1e300})
        with db.transaction() as tx, pytest.raises(sluice.StorageError, match="overflowed"):
            tx.dequeue("q", where="body.n * 1e300 > 0")
        assert [m.body for m in db.queue("q").browse()] == [{"n": 1e300}]
        with db.transaction() as tx:
            assert len(tx.dequeue("q", where="body.n < 1e301 AND body.n > 0")) == 1


_STOPS_INSIDE_RECOVERY = """
import os, signal, sys
import sluice

db = sluice.connect(sys.argv[1])

def stop_here(session):  # called inside the recovery transaction, its lock held
    print("inside", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    return False

db.backend.recover(stop_here)
"""


def test_a_process_stopped_inside_recovery_does_not_stop_everyone_elses(pg_url: str) -> None:
    """Recovery runs one process at a time under a lock; a process frozen while it holds
    it (SIGSTOP, a suspended VM) has its connection ended by the server after a few idle
    seconds, and the others recover again."""
    with subprocess.Popen(
        [sys.executable, "-c", _STOPS_INSIDE_RECOVERY, pg_url], stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            _recover_beside(child, pg_url)
        finally:
            child.kill()


def _recover_beside(child: subprocess.Popen[str], pg_url: str) -> None:
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "inside"
    with sluice.connect(pg_url) as observer:
        looked: list[Any] = []

        def look(session: Any) -> bool:
            looked.append(session)  # called only in the process that holds the recovery lock
            return False

        deadline = time.monotonic() + 30
        while not looked and time.monotonic() < deadline:
            observer.backend.recover(look)
            if not looked:
                time.sleep(0.2)  # the server's idle timeout, not an event of ours
        assert looked, "recovery stayed locked by the stopped process"


def test_libpq_parameters_with_spaces_reach_the_server(
    pg_url: str, admin: psycopg.Connection[Any]
) -> None:
    # libpq decodes a URL's %XX only: re-encoded with '+' for a space, `options=-c a=b`
    # failed to connect ('unrecognized configuration parameter "+a"') and a name with a
    # space arrived with a '+' in it.
    name = f"sluice spaced {time.monotonic_ns()}"
    options = "-c%20statement_timeout%3D54321"
    with sluice.connect(f"{pg_url}&application_name={name.replace(' ', '%20')}&options={options}"):
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
        assert row is not None
        assert row[0] >= 1


def test_a_lone_statement_reuses_its_connections_cursor_and_lets_the_connection_go(
    postgres_server: PostgresServer | str,
) -> None:
    from sluice.backends.postgres_pooler import LoneConnection, statement

    conn = LoneConnection.connect(postgres_base_url(postgres_server), autocommit=True)
    first = statement(conn, "SELECT %(n)s::int", {"n": 1}, pooled=False)
    assert first.fetchall() == [(1,)]
    second = statement(conn, "SELECT %(n)s::int + 1", {"n": 1}, pooled=False)
    assert second is first
    assert second.fetchall() == [(2,)]
    # A failed statement leaves the cursor usable for the next.
    with pytest.raises(psycopg.errors.DivisionByZero):
        statement(conn, "SELECT 1 / %(n)s::int", {"n": 0}, pooled=False)
    assert statement(conn, "SELECT 3", {}, pooled=False).fetchall() == [(3,)]
    # The cursor lives on its connection: once the pool lets the connection go, both go
    # (a map from connections to their cursors kept every replaced connection alive).
    conn.close()
    gone = weakref.ref(conn)
    del conn, first, second
    gc.collect()
    assert gone() is None
