"""Outgoing http gateways (sluice.gateways) on every backend, against real HTTP servers
on loopback: delivery with the message's metadata, tries again after failures that may
pass, Demaq's error messages for those that do not (refused, timed out, disconnected,
bad response), replies correlated into a reply queue, and definitions that cannot work
refused when they are made."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import sluice
from sluice.errors import ConfigurationError

pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.live_server import serve


@dataclass
class Receiver:
    """What a test server answers, in turn (the last one repeats), and what it got."""

    answers: list[tuple[int, bytes, str]] = field(default_factory=lambda: [(200, b"", "")])
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    hold: threading.Event = field(default_factory=threading.Event)
    slow: bool = False

    async def endpoint(self, request: Request) -> Response:
        self.got.append((dict(request.headers), await request.body()))
        if self.slow:  # answers only after the client gave up (its timeout), or the test
            import anyio

            with anyio.move_on_after(5):
                while not self.hold.is_set():
                    await anyio.sleep(0.01)
        status, body, kind = self.answers[min(len(self.got), len(self.answers)) - 1]
        return Response(body, status_code=status, media_type=kind or None)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    r = Receiver()
    app = Starlette(routes=[Route("/in", r.endpoint, methods=["POST"])])
    with serve(app) as base:
        yield r, f"{base}/in"
        r.hold.set()  # before the server's shutdown, which waits for a held request


def _gateway(db: sluice.Database, url: str, **settings: Any) -> None:
    db.create_queue("outbox.errors")
    db.create_queue("outbox", error_queue="outbox.errors")
    db.gateways.define("outbox", direction="out", transport="http", url=url, backoff=0,
                       **settings)  # fmt: skip


def test_a_message_is_posted_with_its_metadata_and_acknowledged(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    r, url = receiver
    _gateway(db, url, header_authorization="Bearer sk_test")
    mid = db.queue("outbox").put({"order": 7}, properties={"region": "eu"}, priority=3,
                                 correlation_id="c-1", group="g1")  # fmt: skip
    assert db.gateways.run_until_idle() == 1
    ((headers, body),) = r.got
    assert json.loads(body) == {"order": 7}
    assert headers["content-type"] == "application/json"
    assert headers["idempotency-key"] == mid == headers["sluice-message-id"]
    assert json.loads(headers["sluice-properties"]) == {"region": "eu"}
    assert headers["sluice-correlation-id"] == "c-1"
    assert headers["sluice-group"] == "g1"
    assert headers["sluice-priority"] == "3"
    assert headers["authorization"] == "Bearer sk_test"
    assert db.queue("outbox").stats()["ready"] == 0
    assert db.queue("outbox.errors").stats()["ready"] == 0


def test_text_and_bytes_go_as_they_are(db: sluice.Database, receiver: tuple[Receiver, str]) -> None:
    r, url = receiver
    _gateway(db, url)
    db.queue("outbox").put("<a>1</a>", content_type="application/xml")
    db.queue("outbox").put(b"\x00\xff")
    assert db.gateways.run_until_idle() == 2
    assert [(h["content-type"], b) for h, b in r.got] == [
        ("application/xml", b"<a>1</a>"), ("application/octet-stream", b"\x00\xff")]  # fmt: skip


def test_failures_that_may_pass_are_tried_again(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    r, url = receiver
    r.answers = [(503, b"", ""), (500, b"", ""), (200, b"", "")]
    _gateway(db, url, attempts=3)
    db.queue("outbox").put({"n": 1})
    assert db.gateways.run_until_idle() == 1
    assert len(r.got) == 3
    assert db.queue("outbox").stats()["ready"] == 0
    assert db.queue("outbox.errors").stats()["ready"] == 0


def test_out_of_attempts_the_message_becomes_an_error_message(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    r, url = receiver
    r.answers = [(502, b"", "")]
    _gateway(db, url, attempts=2)
    mid = db.queue("outbox").put({"n": 1})
    assert db.gateways.run_until_idle() == 1
    assert len(r.got) == 2
    (failed,) = db.queue("outbox.errors").browse()
    assert failed.body == {"n": 1}
    assert failed.id == mid
    assert failed.error is not None
    assert "bad response" in failed.error
    assert "502" in failed.error


def test_a_refusal_is_not_tried_again(db: sluice.Database, receiver: tuple[Receiver, str]) -> None:
    r, url = receiver
    r.answers = [(422, b"no such customer", "text/plain")]
    _gateway(db, url, attempts=5)
    db.queue("outbox").put({"n": 1})
    assert db.gateways.run_until_idle() == 1
    assert len(r.got) == 1
    (failed,) = db.queue("outbox.errors").browse()
    assert failed.error is not None
    assert "refused" in failed.error
    assert "no such customer" in failed.error


def test_no_answer_in_time_is_timed_out(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    r, url = receiver
    r.slow = True
    _gateway(db, url, attempts=1, timeout=0.2)
    db.queue("outbox").put({"n": 1})
    assert db.gateways.run_until_idle() == 1
    (failed,) = db.queue("outbox.errors").browse()
    assert failed.error is not None
    assert "timed out" in failed.error


def test_nobody_listening_is_disconnected(db: sluice.Database) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    _gateway(db, f"http://127.0.0.1:{port}/in", attempts=2)
    db.queue("outbox").put({"n": 1})
    assert db.gateways.run_until_idle() == 1
    (failed,) = db.queue("outbox.errors").browse()
    assert failed.error is not None
    assert "disconnected" in failed.error


def test_an_answer_that_is_not_http_is_a_bad_response(db: sluice.Database) -> None:
    # A server that answers every connection with garbage and closes it.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer() -> None:
            for _ in range(2):
                conn, _ = listener.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(b"\x00garbage, not HTTP\r\n\r\n")

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        _gateway(db, f"http://127.0.0.1:{port}/in", attempts=2)
        db.queue("outbox").put({"n": 1})
        assert db.gateways.run_until_idle() == 1
        thread.join(10)
    (failed,) = db.queue("outbox.errors").browse()
    assert failed.error is not None
    assert "bad response" in failed.error


def test_a_reply_goes_to_the_reply_queue_correlated(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    r, url = receiver
    r.answers = [(200, b'{"price": 12.5}', "application/json")]
    db.create_queue("prices")
    _gateway(db, url, reply_queue="prices")
    mid = db.queue("outbox").put({"item": "x"})
    assert db.gateways.run_until_idle() == 1
    (reply,) = db.queue("prices").browse()
    assert reply.body == {"price": 12.5}
    assert reply.correlation_id == mid
    assert reply.properties["status"] == 200


def test_a_reply_that_is_not_what_it_says_is_a_bad_response(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    r, url = receiver
    r.answers = [(200, b"{not json", "application/json")]
    db.create_queue("prices")
    _gateway(db, url, reply_queue="prices", attempts=3)
    db.queue("outbox").put({"item": "x"})
    assert db.gateways.run_until_idle() == 1
    assert len(r.got) == 1  # delivered; its answer cannot be read: no use posting again
    assert db.queue("prices").stats()["ready"] == 0
    (failed,) = db.queue("outbox.errors").browse()
    assert failed.error is not None
    assert "bad response" in failed.error


def test_a_message_property_may_name_the_url(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    r, url = receiver
    db.create_queue("outbox")
    db.gateways.define("outbox", direction="out", transport="http", url_property="target")
    db.queue("outbox").put({"n": 1}, properties={"target": url})
    assert db.gateways.run_until_idle() == 1
    assert len(r.got) == 1


def test_messages_go_out_in_their_queue_order(
    db: sluice.Database, receiver: tuple[Receiver, str]
) -> None:
    r, url = receiver
    _gateway(db, url)
    for n in range(20):
        db.queue("outbox").put({"n": n})
    assert db.gateways.run_until_idle() == 20
    assert [json.loads(b)["n"] for _, b in r.got] == list(range(20))


def test_definitions_that_cannot_work_are_refused(db: sluice.Database) -> None:
    with pytest.raises(ConfigurationError, match="no transport 'carrier-pigeon'"):
        db.gateways.define("q", direction="out", transport="carrier-pigeon")
    with pytest.raises(ConfigurationError, match="not an http or https URL"):
        db.gateways.define("q", direction="out", transport="http", url="file:///etc/passwd")
    with pytest.raises(ConfigurationError, match="direction is 'in' or 'out'"):
        db.gateways.define("q", direction="sideways", transport="http", url="http://x")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="timeout is a number"):
        db.gateways.define("q", direction="out", transport="http", url="http://x", timeout="soon")
    with pytest.raises(ConfigurationError, match="bad header"):
        db.gateways.define("q", direction="out", transport="http", url="http://x",
                           header_x="a\r\nb")  # fmt: skip
    assert db.gateways.list() == []


def test_define_list_and_drop(db: sluice.Database) -> None:
    g = db.gateways.define("outbox", direction="out", transport="http", url="http://h/in",
                           attempts=5)  # fmt: skip
    assert db.gateways.list() == [g]
    assert g.attempts == 5
    again = db.gateways.define("outbox", direction="out", transport="http", url="http://h/2")
    assert db.gateways.list() == [again]
    db.gateways.drop("outbox")
    assert db.gateways.list() == []
    assert "outbox" in [s.name for s in db.queues()]  # the queue stays
    with pytest.raises(ConfigurationError, match="not a gateway"):
        db.gateways.drop("outbox")


def test_a_sender_whose_lease_may_have_lapsed_delivers_nothing(
    backend_url: str, receiver: tuple[Receiver, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Heartbeats failing (a full disk) for longer than the lease: another process may
    have given this session's messages back, so delivering what it took would put them
    ahead of those (the fault campaign found it). It delivers nothing until renewed."""
    r, url = receiver
    lease = 0.6
    with sluice.connect(backend_url, lease=lease) as db:
        _gateway(db, url, attempts=1)
        db.queue("outbox").put({"n": 1})
        beating = db.context.backend.heartbeat

        def failing(session: int) -> bool:
            raise sluice.StorageError("database or disk is full")

        monkeypatch.setattr(db.context.backend, "heartbeat", failing)
        lapsed = threading.Event()
        lapsed.wait(lease * 1.5)  # the lease's own time passing is what is tested
        with pytest.raises(sluice.LeaseLost, match="renewed its lease"):
            db.gateways.run_until_idle()
        assert r.got == []
        assert db.queue("outbox").stats()["ready"] == 1  # given back, in its place
        monkeypatch.setattr(db.context.backend, "heartbeat", beating)
        renewed = False
        for _ in range(100):  # the next heartbeat renews it (every lease / 3)
            tx = db.transaction()
            try:
                tx.check_lease()
                renewed = True
            except sluice.LeaseLost:
                lapsed.wait(lease / 6)
            finally:
                tx.abort()
            if renewed:
                break
        assert renewed
        assert db.gateways.run_until_idle() == 1
        assert len(r.got) == 1
