"""What a Database says when its pool gives no connection in time: a server it cannot
reach is a lost connection (retried work rides out a restart), a pool whose every
connection is busy is not (retrying would only queue behind the same load)."""

from __future__ import annotations

import socket
import threading

import psycopg
import psycopg_pool
import pytest

import sluice
from sluice.backends.postgres_settings import libpq_seconds
from sluice.backends.postgres_statements import no_connection
from sluice.errors import ConnectionLost, StorageError
from tests.conftest import schema_of


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_pool_that_cannot_open_a_connection_means_the_connection_is_lost() -> None:
    conninfo = f"host=127.0.0.1 port={_closed_port()} dbname=x connect_timeout=1"
    pool = psycopg_pool.ConnectionPool(conninfo, min_size=0, max_size=2, open=False)
    pool.open(wait=False)
    try:
        with pytest.raises(psycopg_pool.PoolTimeout) as timeout:
            pool.getconn(timeout=0.3)
        error = no_connection(pool, timeout.value)
    finally:
        pool.close()
    assert isinstance(error, ConnectionLost)
    assert "could be opened" in str(error)


def test_every_pooled_connection_busy_is_a_storage_error_naming_the_pool_size(
    url: str,
) -> None:
    sep = "&" if "?" in url else "?"
    with sluice.connect(f"{url}{sep}pool_size=1&connect_timeout=2") as db:
        db.create_queue("jobs")
        jobs = db.queue("jobs")
        libpq, _, _ = url.partition("?")
        blocker = psycopg.connect(libpq, autocommit=False)
        # Another client's lock makes a put wait inside the pool's only connection.
        blocker.execute(f"LOCK TABLE {schema_of(url)}.messages IN ACCESS EXCLUSIVE MODE")
        waiting = threading.Thread(target=jobs.put, args=({"n": 1},))
        waiting.start()
        try:
            _until_busy(libpq)
            with pytest.raises(StorageError) as refused:
                jobs.put({"n": 2})
        finally:
            blocker.rollback()
            blocker.close()
            waiting.join(30)
        assert not isinstance(refused.value, ConnectionLost)
        assert "all 1 pooled PostgreSQL connections stayed busy" in str(refused.value)
        assert jobs.stats()["ready"] == 1  # the waiting put went through; the refused did not


def _until_busy(libpq: str) -> None:
    """Until a server backend of this test waits for the lock (the put holds its
    connection)."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    with psycopg.connect(libpq, autocommit=True) as watcher:
        for _ in range(3000):
            (waiting,) = watcher.execute(query).fetchone() or (0,)
            if waiting:
                return
            threading.Event().wait(0.01)
    raise AssertionError("the put never waited for the lock")


@pytest.mark.parametrize(("seconds", "whole"), [(0.5, 1), (1.0, 1), (2.5, 3), (10.0, 10)])
def test_a_fractional_connect_timeout_never_becomes_libpqs_no_limit(
    seconds: float, whole: int
) -> None:
    assert libpq_seconds(seconds) == whole
