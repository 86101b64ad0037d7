"""The SQLite file: opening foreign or newer files, persistence, sharing between connections."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

import sluice
from sluice.backends.sqlite import APPLICATION_ID


def test_text_file_is_not_a_sluice_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some text, definitely not SQLite\n" * 10)
    before = path.read_bytes()
    with pytest.raises(sluice.NotASluiceDatabase, match="not a SQLite database"):
        sluice.connect(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_other_applications_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('Smith')")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(sluice.NotASluiceDatabase, match="another application"):
        sluice.connect(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    sluice.connect(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    with pytest.raises(sluice.SchemaTooNew, match="schema version 999"):
        sluice.connect(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 999
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()


def test_empty_sqlite_file_becomes_a_sluice_database(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with sluice.connect(str(path)) as db:
        db.create_queue("a").put(1)


def test_messages_and_queues_survive_reopening(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with sluice.connect(url) as db:
        q = db.create_queue("a", max_attempts=4)
        q.put({"n": 1}, priority=2)
        q.put({"n": 2})
    with sluice.connect(url) as db:
        assert db.queue("a").spec.max_attempts == 4
        assert [m.body for m in db.queue("a").browse()] == [{"n": 1}, {"n": 2}]


def test_closing_rolls_back_what_the_session_holds(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with sluice.connect(url) as db:
        db.create_queue("a").put("x")
        tx = db.begin()
        tx.dequeue("a")
        tx.enqueue("a", "uncommitted")
        tx.browse("a")
    with sluice.connect(url) as db:
        (m,) = db.queue("a").browse()
        assert (m.body, m.attempts) == ("x", 1)
        assert db.queue("a").stats()["pending"] == 0


@pytest.mark.serial  # a bound on its wall time: run alone, not beside other tests
def test_two_connections_share_a_file_and_wake_each_other(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}?poll_interval=0.01"
    with sluice.connect(url) as producer, sluice.connect(url) as consumer:
        producer.create_queue("a")
        got: list[object] = []
        ready = threading.Event()

        def consume() -> None:
            ready.set()
            m = consumer.queue("a").get(wait=10)
            assert m is not None
            got.append(m.body)
            m.ack()

        t = threading.Thread(target=consume)
        t.start()
        ready.wait()
        started = time.monotonic()
        producer.queue("a").put("hello")
        t.join(10)
        assert got == ["hello"]
        assert time.monotonic() - started < 2


def levels_of(conn: sqlite3.Connection, level: str) -> list[tuple[str, str]]:
    """Start recording each statement with the synchronous level it ran at."""
    ran: list[tuple[str, str]] = []
    current = [level]

    def trace(statement: str) -> None:
        text = " ".join(statement.split())
        if text.startswith("PRAGMA synchronous="):
            current[0] = text.split("=", 1)[1]
        elif not text.startswith("PRAGMA"):
            ran.append((current[0], text))

    conn.set_trace_callback(trace)
    return ran


def test_synchronous_setting_is_applied(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}?synchronous=normal") as db:
        conn = db.backend._conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}?synchronous=extra") as db:
        conn = db.backend._conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 3


def test_at_full_durable_commits_run_at_full_and_claims_at_normal(tmp_path: Path) -> None:
    """The connection rests at NORMAL (claims, acknowledgements: sluice syncs those
    itself, sqlite_sync) and each durable commit switches to FULL for itself."""
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        conn = db.backend._conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1
        q = db.create_queue("q")
        ran = levels_of(conn, "NORMAL")
        q.put("x")
        q.put_many(["y", "z"])
        with db.transaction() as tx:
            tx.enqueue("q", "w")
        m = q.get()
        assert m is not None
        m.ack()
        conn.set_trace_callback(None)
        inserts = [lv for lv, text in ran if "INSERT INTO messages" in text]
        assert inserts
        assert set(inserts) == {"FULL"}, ran
        claims = [lv for lv, text in ran if "UPDATE messages" in text and "c_session" in text]
        assert claims
        assert set(claims) == {"NORMAL"}, ran
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1


def test_transient_queue_commits_without_fsync_and_restores_level(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        q = db.create_queue("t", durability="transient")
        conn = db.backend._conn  # type: ignore[attr-defined]
        ran = levels_of(conn, "NORMAL")
        q.put("x")
        conn.set_trace_callback(None)
        assert {lv for lv, text in ran if "INSERT INTO messages" in text} == {"NORMAL"}
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1
        m = q.get()
        assert m is not None
        m.ack()


def test_cache_size_setting(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}", cache_mib=8) as db:
        conn = db.backend._conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -8 * 1024
    with pytest.raises(sluice.ConfigurationError, match="cache_mib"):
        sluice.connect(f"sqlite:///{tmp_path / 'q.db'}?cache_mib=0")


def test_the_file_opens_through_a_named_vfs(tmp_path: Path) -> None:
    path = tmp_path / "odd ?#name.db"  # a URI's own characters, kept the path's own
    with sluice.connect(f"sqlite:///{quote(str(path))}?vfs=unix") as db:
        db.create_queue("a").put("through unix")
    assert path.exists()
    with sluice.connect(str(path)) as db:
        assert [m.body for m in db.queue("a").browse()] == ["through unix"]
    with pytest.raises(sluice.ConfigurationError, match="no SQLite VFS of that name"):
        sluice.connect(f"sqlite:///{quote(str(path))}?vfs=nowhere")
    with pytest.raises(sluice.ConfigurationError, match="vfs must name"):
        sluice.connect(f"sqlite:///{quote(str(path))}?vfs=")


def test_a_lock_held_past_busy_timeout_is_a_clear_error_and_changes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "q.db"
    with sluice.connect(f"sqlite:///{path}", busy_timeout=0.05) as db:
        q = db.create_queue("a")
        q.put("before")
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process's writer, holding the lock
        try:
            with pytest.raises(sluice.StorageError, match="locked"):
                q.put("blocked")
            with pytest.raises(sluice.StorageError, match="locked"):
                q.get()
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert [m.body for m in q.browse()] == ["before"]
        m = q.get()
        assert m is not None
        m.ack()
        assert q.stats()["ready"] == 0


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() in a threaded process
def test_a_database_refuses_use_in_a_forked_child(tmp_path: Path) -> None:
    import os

    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        q = db.create_queue("a")
        pid = os.fork()
        if pid == 0:  # the child: every use must refuse, touching nothing
            code = 1
            try:
                q.put("from the child")
            except sluice.SluiceError as exc:
                code = 0 if "before a fork" in str(exc) else 2
            try:
                q.browse()
                code = 3
            except sluice.SluiceError:
                pass
            db.close()  # must leave the parent's session alone
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        q.put("from the parent")
        assert [m.body for m in q.browse()] == ["from the parent"]
        m = q.get()  # the parent's session still works and holds claims
        assert m is not None
        m.ack()


def test_opening_a_second_database_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    """Two Databases on one file in one process (the CLI and Spark's driver, a Spark
    worker's cached one): opening the second must not drop the first one's POSIX locks,
    which closing any descriptor of the file does. With them dropped, another process
    closing its connection believes it is the last one out, checkpoints and deletes the
    WAL under the live connections: the corruption the Spark stop tests found."""
    path = tmp_path / "q.db"
    url = f"sqlite:///{path}"
    with sluice.connect(url) as first:
        first.create_queue("q").put("kept")
        with sluice.connect(url) as second:
            wal = Path(f"{path}-wal")
            assert wal.exists()
            # Another process opens and closes the file: it must see it is not the last.
            subprocess.run(
                [sys.executable, "-c", f"import sqlite3; sqlite3.connect({str(path)!r}).execute("
                 "'SELECT count(*) FROM sqlite_master').fetchone()"],
                check=True,
            )  # fmt: skip
            assert wal.exists(), "another process deleted the WAL under live connections"
            second.queue("q").put("also kept")
        assert [m.body for m in first.queue("q").browse()] == ["kept", "also kept"]
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()
