"""PostgreSQL faults: a connection killed mid-transaction, the server restarted under load.

Clients reconnect and carry on; afterwards every committed message exists
exactly once and nothing uncommitted shows.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

import sluice
from tests.conftest import drop_schema, fresh_postgres_url, postgres_base_url, schema_of
from tests.postgres_server import PostgresServer

WORKER = Path(__file__).with_name("fault_worker.py")

pytestmark = pytest.mark.slow


def _terminate_backends(server: PostgresServer | str, application: str) -> int:
    """Cut this test's sessions only: other workers share the server, and their tests too."""
    with psycopg.connect(postgres_base_url(server), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application,),
        ).fetchall()
    return len(rows)


def test_a_consumer_connection_killed_mid_transaction(
    postgres_server: PostgresServer | str,
) -> None:
    url = fresh_postgres_url(postgres_server)
    application = f"sluice-{schema_of(url)}"
    try:
        with sluice.connect(f"{url}&application_name={application}") as db:
            q = db.create_queue("in")
            q.put_many(["m1", "m2"])
            tx = db.begin()
            assert [m.body for m in tx.dequeue("in")] == ["m1"]
            assert _terminate_backends(postgres_server, application) >= 1
            with pytest.raises(sluice.StorageError, match="connection"):
                tx.commit()
            tx.abort()  # on a fresh connection: the claim goes back
            with db.transaction() as again:
                taken = again.dequeue("in", limit=2)
                assert [(m.body, m.attempts) for m in taken] == [("m1", 1), ("m2", 0)]
            assert q.stats()["ready"] == 0
            assert q.stats()["claimed"] == 0
    finally:
        drop_schema(url)


def _read(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in log.read_text().splitlines()]  # type: ignore[misc]


def _await_lines(logs: list[Path], at_least: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(_read(p)) for p in logs) < at_least:
        assert time.monotonic() < deadline, "the workers made no progress"
        time.sleep(0.05)  # the workers report through files: poll them


def _await_each(logs: list[Path], timeout: float = 60) -> None:
    """Every worker has logged once, so each is connected before the server goes away.

    A worker still starting up when the server restarts would fail to open its
    pool, which is a different test (sluice.connect against a server that is down).
    """
    deadline = time.monotonic() + timeout
    while not all(_read(p) for p in logs):
        assert time.monotonic() < deadline, "a worker never got going"
        time.sleep(0.05)


def test_server_restarts_under_load_lose_and_double_nothing(
    own_postgres_server: PostgresServer, tmp_path: Path
) -> None:
    postgres_server = own_postgres_server
    url = fresh_postgres_url(postgres_server)
    try:
        with sluice.connect(url) as db:
            db.create_queue("in")
        stop = tmp_path / "stop"
        produced = [tmp_path / f"p{i}.log" for i in range(2)]
        consumed = [tmp_path / f"c{i}.log" for i in range(2)]
        workers: list[subprocess.Popen[Any]] = [
            subprocess.Popen([sys.executable, str(WORKER), url, "produce", f"p{i}", "400", str(p)])
            for i, p in enumerate(produced)
        ]
        workers += [
            subprocess.Popen(
                [sys.executable, str(WORKER), url, "consume", f"c{i}", str(stop), str(c)]
            )
            for i, c in enumerate(consumed)
        ]
        _await_each(produced + consumed)
        _await_lines(consumed, 100)
        postgres_server.restart("fast")  # clients are disconnected
        _await_lines(consumed, 300)
        postgres_server.restart("immediate")  # a crash: unflushed async commits are lost
        for w in workers[:2]:
            assert w.wait(120) == 0
        stop.touch()
        for w in workers[2:]:
            assert w.wait(120) == 0

        with sluice.connect(url) as db:
            db.recover()
            remaining: list[str] = []
            while True:
                with db.transaction() as tx:
                    taken = [m.body for m in tx.dequeue("in", limit=500)]
                remaining += taken
                if not taken:
                    break
            stats = db.queue("in").stats()
        assert stats["claimed"] == 0
        assert stats["pending"] == 0

        made = [entry for p in produced for entry in _read(p)]
        eaten = [entry for c in consumed for entry in _read(c)]
        made_ok = {b for s, b in made if s == "ok"}
        made_maybe = {b for s, b in made if s == "unknown"}
        eaten_ok = Counter(b for s, b in eaten if s == "ok")
        eaten_maybe = {b for s, b in eaten if s == "unknown"}
        seen = set(eaten_ok) | eaten_maybe | set(remaining)

        assert len(made_ok) > 600, "the producers hardly got through"
        # Nothing committed is lost ...
        assert made_ok <= seen
        # ... nothing is doubled: a message consumed by a known commit is gone for good ...
        assert max(eaten_ok.values()) == 1
        assert not set(eaten_ok) & set(remaining)
        assert len(remaining) == len(set(remaining))
        # ... and nothing uncommitted shows.
        assert seen <= made_ok | made_maybe
        assert not any(b.startswith("aborted-") for b in seen)
    finally:
        drop_schema(url)


def test_closing_after_the_server_went_away_gives_up_within_a_restarts_worth(
    own_postgres_server: PostgresServer,
) -> None:
    """Closing retries through a restart's few seconds, then says so: it once took 86 s."""
    postgres_server = own_postgres_server
    url = fresh_postgres_url(postgres_server)
    db = sluice.connect(url)
    db.create_queue("in")
    postgres_server.stop("fast")
    try:
        started = time.monotonic()
        with pytest.raises(sluice.StorageError, match="connection"):
            db.close()
        waited = time.monotonic() - started
    finally:
        postgres_server.start()
    try:
        # One wait for the pool (10 s) and the few seconds of retries after it.
        assert waited < 30
        with sluice.connect(url) as again:  # the server is back: the queue is there
            assert again.queue("in").stats()["ready"] == 0
    finally:
        drop_schema(url)
