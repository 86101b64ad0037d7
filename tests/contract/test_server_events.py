"""The server-sent events stream of a queue (sluice.server.events), on every backend,
read from a real uvicorn server (Starlette's TestClient cannot read an endless
stream): messages pushed as leased events, no more unsettled than the credit,
settled by token, and what the stream held given back when the client goes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import sluice

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from sluice.server.app import create_app  # noqa: E402
from tests.contract.test_server import key, problem  # noqa: E402
from tests.live_server import serve  # noqa: E402


@pytest.fixture
def base(db: sluice.Database) -> Iterator[str]:
    """A real server over ``db``, in a thread of this process."""
    db.create_queue("orders")
    with serve(create_app(db)) as url:
        yield url


def events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The messages of an event stream's lines (comments and blank lines skipped)."""
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line.removeprefix("data: "))


def test_a_stream_pushes_messages_within_its_credit(base: str, db: sluice.Database) -> None:
    auth = key(db, "app", "orders:consume")
    db.queue("orders").put_many([{"n": n} for n in range(3)])
    with httpx.Client(base_url=base, headers=auth, timeout=30) as http:
        with http.stream("GET", "/api/queues/orders/events",
                         params={"credit": 2, "lease": 60}) as r:  # fmt: skip
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            pushed = events(r.iter_lines())
            first, second = next(pushed), next(pushed)
            assert [first["body"], second["body"]] == [{"n": 0}, {"n": 1}]
            assert db.queue("orders").stats()["claimed"] == 2  # the credit: no third
            assert http.post(f"/api/leases/{first['token']}/ack").status_code == 204
            third = next(pushed)  # a settled one makes room
            assert third["body"] == {"n": 2}
        # The client went: the stream gives back what it held (the second and third).
        ready = 0
        for _ in range(600):
            ready = db.queue("orders").stats()["ready"]
            if ready == 2:
                break
            threading.Event().wait(0.05)  # the server notices on its next look (<= 1 s)
        assert ready == 2
        assert db.queue("orders").stats()["claimed"] == 0


def test_a_stream_needs_consume_and_a_good_selection(base: str, db: sluice.Database) -> None:
    with httpx.Client(base_url=base, timeout=30) as http:
        problem(http.get("/api/queues/orders/events"), 401)
        producer = key(db, "p", "orders:produce")
        problem(http.get("/api/queues/orders/events", headers=producer), 403)
        auth = key(db, "c", "*:consume")
        problem(http.get("/api/queues/nowhere/events", headers=auth), 404)
        problem(http.get("/api/queues/orders/events", headers=auth,
                         params={"where": "body.n >"}), 422, "ExpressionError")  # fmt: skip


def test_long_polls_hold_no_thread(base: str, db: sluice.Database) -> None:
    # More long polls than FastAPI's thread pool has threads (40). Were each to hold
    # one while it waits, the enqueue below would queue behind them until they timed
    # out empty; waiting on the event loop (sluice.aio), every poll gets a message.
    auth = key(db, "app", "orders:consume,produce")
    n = 48

    def poll() -> list[Any]:
        with httpx.Client(base_url=base, headers=auth, timeout=60) as http:
            answer = http.post("/api/queues/orders/leases", json={"wait": 20})
            assert answer.status_code == 200, answer.text
            return list(answer.json()["messages"])

    with ThreadPoolExecutor(n) as pool:
        polls = [pool.submit(poll) for _ in range(n)]
        deadline = time.monotonic() + 30
        while db.context.wakeups.waiting().get("orders", 0) < n:  # all of them waiting
            assert time.monotonic() < deadline, db.context.wakeups.waiting()
            threading.Event().wait(0.01)
        with httpx.Client(base_url=base, headers=auth, timeout=10) as http:
            put = http.post("/api/queues/orders/messages",
                            json={"messages": [{"body": i} for i in range(n)]})  # fmt: skip
            assert put.status_code == 201, put.text
        taken = [m["body"] for p in polls for m in p.result()]
    assert sorted(taken) == list(range(n))
