"""Recovery against a claim that commits while it runs.

A process whose session was recovered (its lease ran out under load, or while the server
restarted) goes on working with that session until it notices, so its claims can commit
while another process rolls back what unregistered sessions hold. Rolling back takes
several statements, each on its own snapshot in READ COMMITTED. The fault campaign found
the lanes read before the release missing a head claimed between the two: the release
set it waiting again, and no statement made the lane a new head, so a group stopped for
good (714 messages left ready and never taken, CI of 2026-12-06).
"""

from __future__ import annotations

import threading

import psycopg
import pytest

import sluice
from tests.conftest import schema_of

STALE = 999_999  # a session id nobody registered: the recovered process's


def _waiting_on_a_lock(admin: psycopg.Connection[tuple[object, ...]], schema: str) -> bool:
    """Whether a statement on ``schema`` (this test's, however many run beside it) waits
    on a lock: recovery's DELETE of the pending row."""
    row = admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query ILIKE 'DELETE%%' AND strpos(query, %s) > 0",
        (f'"{schema}".messages',),
    ).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("max_attempts", [None, 1], ids=["released", "dead-lettered"])
def test_a_head_claimed_by_a_recovered_session_during_recovery_leaves_its_lane_a_head(
    url: str, max_attempts: int | None
) -> None:
    db = sluice.connect(url)
    db.create_queue("failed")
    grouped = db.create_queue("grouped", max_attempts=max_attempts, error_queue="failed")
    grouped.put_many(["a", "b", "c"], group="g")
    db.create_queue("other").put("p")
    base, schema = url.partition("?")[0], schema_of(url)
    stale = psycopg.connect(base, options=f"-c search_path={schema}")
    admin = psycopg.connect(base, autocommit=True)
    try:
        (head,) = stale.execute("SELECT id FROM messages WHERE state = 1 AND lane IS NOT NULL")
        (pending,) = stale.execute(
            "SELECT m.id FROM messages AS m JOIN queues AS q ON q.id = m.queue_id"
            " WHERE q.name = 'other'"
        )
        # A message the stale session had enqueued and not committed: recovery deletes it,
        # after the stale session's transaction below lets go of it.
        stale.execute(
            "UPDATE messages SET state = 0, p_session = %s WHERE id = %s", (STALE, *pending)
        )
        stale.commit()
        stale.execute("SELECT 1 FROM messages WHERE id = %s FOR UPDATE", pending)
        stale.execute(
            "UPDATE messages SET state = 2, c_session = %s, c_tx = 1 WHERE id = %s", (STALE, *head)
        )
        # Recovery starts while the claim is uncommitted, and waits on the pending row.
        recovery = threading.Thread(target=db.backend.close_session, args=(STALE,))
        recovery.start()
        while not _waiting_on_a_lock(admin, schema):
            if not recovery.is_alive():
                pytest.fail("recovery did not wait for the stale session's row")
            admin.execute("SELECT pg_sleep(0.01)")
        stale.commit()  # the claim lands between recovery's statements
        recovery.join(timeout=30)
        assert not recovery.is_alive()
        # Released, the head is the lane's head again; dead-lettered, the next one is.
        left, failed = (["a", "b", "c"], []) if max_attempts is None else (["b", "c"], ["a"])
        tx = db.transaction()
        assert [m.body for m in tx.dequeue("grouped", limit=5)] == left
        assert [m.body for m in tx.dequeue("failed", limit=5)] == failed
        tx.commit()
    finally:
        stale.close()
        admin.close()
        db.close()
