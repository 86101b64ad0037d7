"""Hosts sharing PostgreSQL time messages by the server's clock, read through an offset."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, cast

import psycopg
import pytest

import sluice
from sluice.backends.postgres_statements import server_offset as _server_offset
from sluice.clock import OffsetClock
from tests.conftest import drop_schema, fresh_postgres_url
from tests.postgres_server import PostgresServer


@pytest.fixture
def pg_url(postgres_server: PostgresServer | str) -> Iterator[str]:
    url = fresh_postgres_url(postgres_server)
    yield url
    drop_schema(url)


class _ServerAhead:
    """A connection to a server whose clock is an hour ahead of this host's."""

    def execute(self, query: str) -> _ServerAhead:
        return self

    def fetchall(self) -> list[tuple[float]]:
        return [(time.time() + 3600.0,)]


def test_the_offset_is_the_servers_clock_minus_this_hosts() -> None:
    conn = cast(psycopg.Connection[Any], _ServerAhead())
    assert 3599.0 < _server_offset(conn, "SELECT server time") < 3601.0


def test_on_the_servers_host_messages_are_timed_by_its_clock_exactly(pg_url: str) -> None:
    with sluice.connect(pg_url) as db:
        assert isinstance(db.clock, OffsetClock)
        assert db.clock.offset == 0.0  # one clock: nothing to correct
        before = time.time()
        q = db.create_queue("orders")
        q.put("now")
        (message,) = q.browse()
        assert before <= message.enqueued <= time.time()


def test_a_host_behind_the_server_still_enqueues_by_the_servers_time(pg_url: str) -> None:
    with sluice.connect(pg_url) as db:
        assert isinstance(db.clock, OffsetClock)
        db.clock.offset = 3600.0  # as a host an hour behind the server measures it
        q = db.create_queue("orders")
        q.put("due at once")
        q.put("due in a minute", delay=60)
        (message,) = q.browse()
        assert message.enqueued > time.time() + 3500
        taken = q.get()
        assert taken is not None
        assert taken.body == "due at once"
        taken.ack()
        assert q.get() is None  # a minute by the server's clock, not this host's
