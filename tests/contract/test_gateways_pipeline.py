"""An outgoing gateway run as a pipeline (sluice.gateways.pipeline: what
``db.gateways.start`` and ``sluice run`` do), on every backend, against a real HTTP
server on loopback: the queue's order kept, each message settled once, the next
messages held (their attempts not counted) while a failing one is tried again, a
grouped queue's messages one after the other, a stop that commits the delivered and
gives back the taken, and a thread that failed running again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import sluice

pytest.importorskip("uvicorn")

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sluice.errors import StorageError
from sluice.gateways.model import Gateway
from sluice.gateways.pipeline import Pipeline
from sluice.gateways.registry import TRANSPORTS, transport
from sluice.gateways.sender import Sender
from sluice.gateways.transports import Transport
from sluice.message import Message
from tests.live_server import serve

WAIT = 30.0  # seconds a test waits for an event that comes at once when all is well


@dataclass
class Receiver:
    """Answers each post with the next of ``statuses`` (then 200), after ``held`` posts
    waits for ``go``; counts what it got, ``all_in`` set at ``expect`` 2xx answers."""

    statuses: list[int] = field(default_factory=list)
    expect: int = 0
    held: int | None = None
    go: threading.Event = field(default_factory=threading.Event)
    waiting: threading.Event = field(default_factory=threading.Event)
    all_in: threading.Event = field(default_factory=threading.Event)
    got: list[Any] = field(default_factory=list)
    ok: int = 0

    async def endpoint(self, request: Request) -> Response:
        import anyio

        body = (await request.json())["n"]
        self.got.append(body)
        if self.held is not None and len(self.got) > self.held:
            self.waiting.set()
            await anyio.to_thread.run_sync(self.go.wait, WAIT)
        status = self.statuses.pop(0) if self.statuses else 200
        if status < 300:
            self.ok += 1
            if self.ok == self.expect:
                self.all_in.set()
        return Response(b"", status_code=status)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    r = Receiver()
    app = Starlette(routes=[Route("/in", r.endpoint, methods=["POST"])])
    with serve(app) as base:
        yield r, f"{base}/in"
    r.go.set()


def _outbox(db: sluice.Database, url: str, **settings: Any) -> None:
    db.create_queue("outbox.errors")
    db.create_queue("outbox", error_queue="outbox.errors", max_attempts=1)
    db.gateways.define("outbox", direction="out", transport="http", url=url, backoff=0,
                       **settings)  # fmt: skip


def _run_until(db: sluice.Database, done: threading.Event) -> None:
    """The gateways run (db.gateways.start) until ``done``."""
    db.gateways.start(poll=0.05)
    try:
        assert done.wait(WAIT)
    finally:
        db.gateways.stop()


def _drained(db: sluice.Database) -> None:
    stats = db.queue("outbox").stats()
    assert (stats["ready"], stats["claimed"]) == (0, 0), stats


@pytest.mark.parametrize("batch", [1, 4])
def test_the_pipeline_keeps_the_order_and_settles_each_once(
    db: sluice.Database, receiver: tuple[Receiver, str], batch: int
) -> None:
    r, url = receiver
    _outbox(db, url, batch=batch)
    r.expect = 40
    db.queue("outbox").put_many([{"n": n} for n in range(40)])
    _run_until(db, r.all_in)
    assert r.got == list(range(40))
    _drained(db)


def test_a_failure_holds_the_next_messages_without_counting_their_attempts(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    # max_attempts=1: a message given back even once would be an error message.
    r, url = receiver
    _outbox(db, url, attempts=5)
    r.statuses = [503, 503]
    r.expect = 3
    db.queue("outbox").put_many([{"n": n} for n in range(3)])
    _run_until(db, r.all_in)
    assert r.got == [0, 0, 0, 1, 2]
    assert db.queue("outbox.errors").stats()["ready"] == 0
    _drained(db)


def test_a_grouped_queue_goes_one_message_after_the_other(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    r, url = receiver
    _outbox(db, url)
    r.expect = 12
    for n in range(12):
        db.queue("outbox").put({"n": n}, group=f"g{n % 2}")
    _run_until(db, r.all_in)
    assert [n for n in r.got if n % 2 == 0] == list(range(0, 12, 2))
    assert [n for n in r.got if n % 2 == 1] == list(range(1, 12, 2))
    assert sorted(r.got) == list(range(12))
    _drained(db)


def test_a_stop_commits_the_delivered_and_gives_back_the_taken(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    r, url = receiver
    db.create_queue("outbox")
    db.gateways.define("outbox", direction="out", transport="http", url=url, backoff=0)
    r.held = 1  # the second post waits: the first is delivered, the third taken
    db.queue("outbox").put_many([{"n": n} for n in range(3)])
    gateway = db.gateways.get("outbox")
    assert gateway is not None
    stop = threading.Event()
    outbound = transport(gateway).outbound
    assert outbound is not None
    sender = Sender(db, gateway, outbound(db, gateway), stop)
    running = threading.Thread(target=Pipeline(db, sender, stop).run, kwargs={"poll": 0.05})
    running.start()
    try:
        assert r.waiting.wait(WAIT)
        stop.set()
        r.go.set()  # the second is answered after the stop
        running.join(WAIT)
        assert not running.is_alive()
    finally:
        stop.set()
        r.go.set()
        sender.close()
    assert r.got == [0, 1]
    (left,) = db.queue("outbox").browse()
    assert left.body == {"n": 2}
    assert db.queue("outbox").stats()["claimed"] == 0


def test_a_gateway_thread_that_fails_runs_again(
    db: sluice.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failure of sluice's own (here a transport's StorageError, as when the database
    # goes away mid-round) gives the messages back; the thread runs again after a pause.
    got: list[Any] = []
    all_in = threading.Event()

    class Flaky:
        def __init__(self, db: object, gateway: Gateway) -> None:
            self.failed = False

        def deliver(self, message: Message) -> None:
            if not self.failed:
                self.failed = True
                raise StorageError("the database went away")
            got.append(message.body["n"])
            if len(got) == 3:
                all_in.set()

        def close(self) -> None:
            pass

    flaky = Transport("flaky", ("out",), lambda gateway: None, outbound=Flaky)
    monkeypatch.setitem(TRANSPORTS, "flaky", lambda: flaky)
    db.create_queue("outbox")
    db.gateways.define("outbox", direction="out", transport="flaky")
    db.queue("outbox").put_many([{"n": n} for n in range(3)])
    _run_until(db, all_in)
    assert got == [0, 1, 2]
    _drained(db)
