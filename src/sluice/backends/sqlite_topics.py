"""The SQLite backend's topics: a subscription's pull, its statements one by one inside
one write transaction (in-process, each costs microseconds; PostgreSQL's is one statement,
postgres_topics)."""

from __future__ import annotations

from sluice.backends.records import Selection
from sluice.backends.topics import Refill, SqlTopics
from sluice.errors import QueueNotFound

__all__ = ["SqliteTopics"]


class SqliteTopics(SqlTopics):
    """Topics of ``SqliteBackend`` (mixed into it)."""

    def _refill(self, r: Refill, selector: Selection | None) -> tuple[int, bool]:
        half = (r.window + 1) // 2
        rows = self._read_rows("subscription_ready", {"subscription": r.sub_id, "half": half})
        ready = int(rows[0][0])
        # Refilled once half the window is taken, not after every message: a pull
        # is a write transaction, worth its cost only for many rows.
        room = None if r.everything else r.window - ready
        if room is not None and ready >= half:
            return ready, False
        query, extra = self._with_selector("pull", selector)
        with self._transaction(durable=False) as conn:
            locked = conn.execute(
                self._q["lock_subscription"], {"subscription": r.sub_id}
            ).fetchone()
            if locked is None:  # dropped since the question, by another thread or process
                raise QueueNotFound(f"subscription {r.subscription!r} does not exist")
            (pointer,) = locked
            # The topic's last message first, and nothing past it: a message committed
            # after this read has a higher id (commit order), so it is left for next time.
            (last,) = conn.execute(
                self._q["topic_last"], {"pointer": pointer, "topic": r.topic_id}
            ).fetchone()
            if last is None:
                return ready, False
            params = {
                "subscription": r.sub_id,
                "topic": r.topic_id,
                "pointer": pointer,
                "upto": last,
                "room": -1 if room is None else room,  # LIMIT -1: all,
            }
            taken = conn.execute(query, params | extra).fetchall()
            # Full: the pointer stops at the last message taken, so what lies beyond it
            # is looked at again next time; otherwise it passed everything up to last.
            full = room is not None and len(taken) >= room
            new = max(ref for ref, _ in taken) if full else last
            conn.execute(
                self._q["set_pointer"], {"subscription": r.sub_id, "pointer": new, "now": r.now}
            )
            lanes = sorted({(r.subscription, lane) for _, lane in taken if lane is not None})
            if lanes:
                self._promote(conn, lanes)
        return ready + len(taken), True
