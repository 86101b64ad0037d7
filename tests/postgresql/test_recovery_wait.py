"""An asked-for recovery waits for a pass another backend holds; passes of its own do not.

One recovery pass at a time runs in a schema (an advisory lock). A process killed inside
its pass leaves its backend holding that lock until the server notices the client has
gone. ``db.recover()`` right after the kill then found the lock taken and returned none,
with the dead session still holding its messages (tests/reliability/test_crash.py, on a
loaded machine). Asked for, a pass now waits its turn; the heartbeat's passes and a new
connection's still leave the work to the pass that runs.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import psycopg
import pytest

import sluice
from sluice.backends.postgres_schema import LOCK_CLASS, recovery_lock
from sluice.engine.lease import host_key
from tests.conftest import schema_of

Admin = psycopg.Connection[tuple[object, ...]]


def _waits_for_the_pass(admin: Admin, schema: str) -> bool:
    """Whether a backend waits for ``schema``'s recovery lock (a two-key advisory lock:
    classid and objid are the keys as unsigned 32-bit numbers)."""
    row = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 2",
        (LOCK_CLASS & 0xFFFFFFFF, recovery_lock(schema) & 0xFFFFFFFF),
    ).fetchone()
    return bool(row and row[0])


@pytest.fixture
def held(url: str) -> Iterator[tuple[Admin, Admin]]:
    """A connection whose open transaction holds the schema's recovery lock, as the backend
    of a process killed in its pass does; and an admin connection to watch the locks."""
    base = url.partition("?")[0]
    holder = psycopg.connect(base)
    admin = psycopg.connect(base, autocommit=True)
    try:
        holder.execute(
            "SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, recovery_lock(schema_of(url)))
        )
        yield holder, admin
    finally:
        holder.close()
        admin.close()


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped): a killed owner's."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    return int(child.stdout)


def test_an_asked_for_recovery_waits_for_the_pass_a_dead_backend_holds(
    url: str, held: tuple[Admin, Admin]
) -> None:
    holder, admin = held
    with sluice.connect(url) as db:
        db.create_queue("in").put("m0")
        dead = db.backend.open_session(host_key(), _dead_pid(), 30.0)
        admin.execute(
            f'UPDATE "{schema_of(url)}".messages SET state = 2, c_session = %s, c_tx = 1',
            (dead,),
        )
        assert db.queue("in").stats()["claimed"] == 1
        found: list[list[int]] = []
        asked = threading.Thread(target=lambda: found.append(db.recover()))
        asked.start()
        while not _waits_for_the_pass(admin, schema_of(url)):
            if not asked.is_alive():
                pytest.fail(f"recover() did not wait for the pass in progress: {found}")
            admin.execute("SELECT pg_sleep(0.01)")
        holder.rollback()  # the server ends the killed process's transaction
        asked.join(timeout=60)
        assert not asked.is_alive()
        assert found == [[dead]]
        assert db.queue("in").stats()["claimed"] == 0
        assert [m.body for m in db.queue("in").browse()] == ["m0"]


def test_a_new_connection_and_the_heartbeat_leave_the_work_to_the_pass_that_runs(
    url: str, held: tuple[Admin, Admin]
) -> None:
    holder, _ = held
    connected: list[sluice.Database] = []
    # A new connection's pass does not queue behind the one that runs: it connects while
    # the lock is held (the join is a bound for a hang, not a timing).
    opening = threading.Thread(target=lambda: connected.append(sluice.connect(url)))
    opening.start()
    opening.join(timeout=60)
    assert not opening.is_alive(), "connecting waited for another recovery pass"
    (db,) = connected
    try:
        dead = db.backend.open_session(host_key(), _dead_pid(), 30.0)
        # The heartbeat's pass skips too, and reports none while a dead session waits...
        assert db.context.recover(wait=False) == []
        holder.rollback()
        assert db.context.recover(wait=False) == [dead]  # ...and takes it on its turn
    finally:
        db.close()
