"""Incoming http gateways (POST /api/gateways/{queue} of sluice serve) and node-to-node
forwarding: an outgoing http gateway of one database posting into an incoming one of
another's server, each message stored there once and in order, whatever is retried.
The sender is every backend; the receiver a SQLite file behind a real uvicorn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice

pytest.importorskip("httpx")
pytest.importorskip("fastapi")

import httpx

from sluice.gateways.http import HttpOut
from sluice.server.app import create_app
from sluice.server.grants import Grant, Keys
from tests.live_server import serve


class Node:
    """A receiving sluice: its database, its server's base URL and a producer's key."""

    def __init__(self, db: sluice.Database, base: str, key: str) -> None:
        self.db = db
        self.base = base
        self.key = key

    def post(self, queue: str, body: bytes, **headers: str) -> httpx.Response:
        sent = {"authorization": f"Bearer {self.key}", **headers}
        return httpx.post(f"{self.base}/api/gateways/{queue}", content=body, headers=sent)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with sluice.connect(f"sqlite:///{tmp_path / 'receiver.db'}") as db:
        db.create_queue("inbox")
        db.gateways.define("inbox", direction="in", transport="http")
        db.create_queue("plain")
        key = Keys(db).add("sender", [Grant.parse("inbox:produce"), Grant.parse("plain:produce")])
        with serve(create_app(db)) as base:
            yield Node(db, base, key)


def test_a_post_is_stored_as_sent(node: Node) -> None:
    done = node.post("inbox", b"<order id='1'/>", **{"content-type": "application/xml",
                     "sluice-properties": '{"region": "eu"}', "sluice-priority": "4",
                     "sluice-group": "g", "sluice-correlation-id": "c"})  # fmt: skip
    assert done.status_code == 201, done.text
    (m,) = node.db.queue("inbox").browse()
    assert m.id == done.json()["id"]
    assert (m.body, m.content_type) == ("<order id='1'/>", "application/xml")
    assert (m.properties, m.priority, m.group, m.correlation_id) == ({"region": "eu"}, 4, "g", "c")
    raw = node.post("inbox", b"\x00\x01")
    assert raw.status_code == 201
    assert node.db.queue("inbox").browse()[1].body == b"\x00\x01"


def test_bad_posts_are_refused_and_store_nothing(node: Node) -> None:
    assert httpx.post(f"{node.base}/api/gateways/inbox", content=b"{}").status_code == 401
    assert node.post("plain", b"{}").status_code == 404  # a queue, not an http gateway
    assert node.post("nowhere", b"{}").status_code in (403, 404)
    bad = node.post("inbox", b"{nope", **{"content-type": "application/json"})
    assert (bad.status_code, bad.json()["error"]) == (422, "InvalidBody")
    props = node.post("inbox", b"1", **{"sluice-properties": "[1]"})
    assert props.status_code == 422
    prio = node.post("inbox", b"1", **{"sluice-priority": "high"})
    assert prio.status_code == 422
    assert node.db.queue("inbox").stats()["ready"] == 0


def test_a_retried_post_is_stored_once(node: Node) -> None:
    first = node.post("inbox", b'{"n": 1}', **{"content-type": "application/json",
                                                "idempotency-key": "m-1"})  # fmt: skip
    again = node.post("inbox", b'{"n": 1}', **{"content-type": "application/json",
                                                "idempotency-key": "m-1"})  # fmt: skip
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    assert node.db.queue("inbox").stats()["ready"] == 1


def _forwarding(db: sluice.Database, node: Node) -> None:
    db.create_queue("outbox")
    db.gateways.define("outbox", direction="out", transport="http", backoff=0,
                       url=f"{node.base}/api/gateways/inbox",
                       header_authorization=f"Bearer {node.key}")  # fmt: skip


def test_forwarding_keeps_everything_and_the_order(db: sluice.Database, node: Node) -> None:
    _forwarding(db, node)
    for n in range(30):
        db.queue("outbox").put({"n": n}, group=f"g{n % 3}", properties={"n": n})
    assert db.gateways.run_until_idle() == 30
    arrived = node.db.queue("inbox").browse(limit=100)  # in the order they were stored
    assert [m.body["n"] for m in arrived] == list(range(30))
    assert [m.group for m in arrived] == [f"g{n % 3}" for n in range(30)]
    assert [m.properties for m in arrived] == [{"n": n} for n in range(30)]
    assert db.queue("outbox").stats()["ready"] == 0


def test_a_delivery_repeated_after_a_crash_is_stored_once(db: sluice.Database, node: Node) -> None:
    # What a sender killed after the post but before its commit does when it starts
    # again: the same message, the same id, posted a second time.
    _forwarding(db, node)
    db.queue("outbox").put({"n": 1})
    (gateway,) = db.gateways.list()
    out = HttpOut(db, gateway)
    try:
        (m,) = db.queue("outbox").browse()
        out.deliver(m)
        out.deliver(m)
    finally:
        out.close()
    (stored,) = node.db.queue("inbox").browse()
    assert stored.body == {"n": 1}


def _batched(db: sluice.Database, node: Node, batch: int) -> None:
    db.create_queue("outbox")
    db.gateways.define("outbox", direction="out", transport="http", backoff=0, batch=batch,
                       url=f"{node.base}/api/gateways/inbox",
                       header_authorization=f"Bearer {node.key}")  # fmt: skip


def test_batched_forwarding_keeps_everything_and_the_order(db: sluice.Database, node: Node) -> None:
    _batched(db, node, 8)
    for n in range(30):
        db.queue("outbox").put({"n": n}, group=f"g{n % 3}", properties={"n": n}, priority=3,
                               correlation_id=f"c{n}")  # fmt: skip
    db.queue("outbox").put(b"\x00raw", content_type="application/octet-stream", priority=3)
    db.queue("outbox").put("<x/>", content_type="application/xml", priority=3)
    assert db.gateways.run_until_idle() == 32
    # A batch is taken as the queue gives several at once: each group's messages in
    # order (what forwarding needs), the groups' heads first.
    got = node.db.queue("inbox").browse(limit=100)
    numbered = [m for m in got if isinstance(m.body, dict)]
    assert sorted(m.body["n"] for m in numbered) == list(range(30))
    for g in range(3):
        mine = [m for m in numbered if m.group == f"g{g}"]
        assert [m.body["n"] for m in mine] == list(range(g, 30, 3))
        assert [m.properties for m in mine] == [{"n": n} for n in range(g, 30, 3)]
        assert [(m.priority, m.correlation_id) for m in mine] == [
            (3, f"c{n}") for n in range(g, 30, 3)
        ]
    others = sorted(((m.body, m.content_type) for m in got if not isinstance(m.body, dict)),
                    key=repr)  # fmt: skip
    assert others == [("<x/>", "application/xml"), (b"\x00raw", "application/octet-stream")]
    assert db.queue("outbox").stats()["ready"] == 0


def test_a_batch_sent_again_or_overlapping_is_stored_once(db: sluice.Database, node: Node) -> None:
    # A sender killed after its post but before its commit sends the same messages again,
    # alone or in another batch: each is stored once, in order, and answered as before.
    _batched(db, node, 8)
    for n in range(5):
        db.queue("outbox").put({"n": n})
    (gateway,) = db.gateways.list()
    out = HttpOut(db, gateway)
    try:
        ms = db.queue("outbox").browse()
        single = out.deliver(ms[0])
        first, failed = out.deliver_many(ms[:3])
        assert failed is None
        again, failed = out.deliver_many(ms)
        assert failed is None
    finally:
        out.close()
    assert single is not None
    assert first[0] is not None
    assert first[0].body == single.body
    assert [r.body for r in again if r is not None][:3] == [r.body for r in first if r]
    stored = node.db.queue("inbox").browse(limit=100)
    assert [m.body["n"] for m in stored] == list(range(5))


def test_a_batch_stops_at_the_first_entry_it_cannot_store(node: Node) -> None:
    entry = {"body": "eyJuIjogMX0=", "content_type": "application/json", "priority": 0}
    batch = {"messages": [{**entry, "key": "k-1"}, {**entry, "key": "k-2"},
                          {**entry, "key": "k-1", "priority": 3},  # the key, another request
                          {**entry, "key": "k-4"}]}  # fmt: skip
    done = httpx.post(f"{node.base}/api/gateways/inbox/batch", json=batch,
                      headers={"authorization": f"Bearer {node.key}"})  # fmt: skip
    assert done.status_code == 200, done.text
    results = done.json()["results"]
    assert [r["status"] for r in results] == [201, 201, 422]
    assert node.db.queue("inbox").stats()["ready"] == 2
    again = node.post("inbox", b'{"n": 1}', **{"content-type": "application/json",
                                                "idempotency-key": "k-2",
                                                "sluice-priority": "0"})  # fmt: skip
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == results[1]["answer"]
    assert node.db.queue("inbox").stats()["ready"] == 2


def test_a_batch_setting_is_checked(db: sluice.Database) -> None:
    with pytest.raises(sluice.ConfigurationError):
        db.gateways.define("outbox", direction="out", transport="http", batch=0,
                           url="http://127.0.0.1:1/api/gateways/inbox")  # fmt: skip
    with pytest.raises(sluice.ConfigurationError):
        db.gateways.define("outbox", direction="out", transport="http", batch=1.5,
                           url="http://127.0.0.1:1/api/gateways/inbox")  # fmt: skip
