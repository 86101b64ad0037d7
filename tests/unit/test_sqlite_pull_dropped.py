"""SQLite's pull of a subscription dropped between its question and its pull (another
thread or process unsubscribed meanwhile): QueueNotFound, as everywhere else, not a
TypeError from an empty row (backends/sqlite_topics.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import sluice
from sluice.backends.sqlite import SQLiteBackend
from sluice.backends.topics import Refill
from sluice.errors import QueueNotFound


def test_a_pull_of_a_subscription_dropped_after_its_question_says_it_is_gone(
    tmp_path: Path,
) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        db.create_topic("news")
        db.subscribe("news", "reader")
        db.queue("news").put("first")
        backend = db.backend
        assert isinstance(backend, SQLiteBackend)
        # What the question read, before the subscription went.
        sub_id, topic_id, *_ = backend._read_rows("subscription_state", {"name": "reader"})[0]
        asked = Refill("reader", sub_id, topic_id, 10, False, db.clock.now())
        db.unsubscribe("reader")
        with pytest.raises(QueueNotFound, match="subscription 'reader' does not exist"):
            backend._refill(asked, None)
