"""Queue transactions across HTTP requests (sluice.server.transactions), on every
backend: all or nothing at commit, nothing at abort or expiry, one key's alone, and
an open one keeps other clients writing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sluice
from sluice import ManualClock

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from sluice.server.app import create_app
from tests.contract.test_server import T0, key, problem


@pytest.fixture
def client(db: sluice.Database, clock: ManualClock) -> Iterator[TestClient]:
    db.create_queue("orders", error_queue="bad")
    db.create_queue("invoices")
    with TestClient(create_app(db)) as client:
        yield client


def begin(client: TestClient, auth: dict[str, str], idle: float = 60) -> str:
    r = client.post("/api/transactions", headers=auth, json={"idle": idle})
    assert r.status_code == 201, r.text
    assert r.json()["expires_at"] == T0 + idle
    ref: str = r.json()["id"]
    return ref


def test_a_transaction_moves_messages_all_at_once_at_commit(
    client: TestClient, db: sluice.Database
) -> None:
    auth = key(db, "mover", "orders:consume", "invoices:produce")
    db.queue("orders").put_many([{"n": 1}, {"n": 2}, {"n": 3}])
    ref = begin(client, auth)
    taken = client.post(f"/api/transactions/{ref}/queues/orders/dequeue", headers=auth,
                        json={"limit": 2}).json()  # fmt: skip
    assert [m["body"] for m in taken] == [{"n": 1}, {"n": 2}]
    sent = client.post(f"/api/transactions/{ref}/queues/invoices/messages", headers=auth,
                       json={"messages": [{"body": {"for": 1}}, {"body": {"for": 2}}]})  # fmt: skip
    assert sent.status_code == 201, sent.text
    # Nothing shows before the commit: the invoices wait, the orders are held.
    assert db.queue("invoices").stats()["ready"] == 0
    assert db.queue("orders").stats()["claimed"] == 2
    held = client.get(f"/api/transactions/{ref}", headers=auth).json()["holds"]
    assert held == sorted(m["id"] for m in taken)
    assert client.post(f"/api/transactions/{ref}/commit", headers=auth).status_code == 204
    assert [m.body for m in db.queue("invoices").browse()] == [{"for": 1}, {"for": 2}]
    assert [m.body for m in db.queue("orders").browse()] == [{"n": 3}]
    problem(client.post(f"/api/transactions/{ref}/commit", headers=auth), 404,
            "TransactionNotFound")  # fmt: skip


def test_abort_undoes_everything_and_release_and_reject_work_inside(
    client: TestClient, db: sluice.Database
) -> None:
    auth = key(db, "mover", "orders:consume,produce")
    db.queue("orders").put_many([{"n": 1}, {"n": 2}, {"n": 3}])
    ref = begin(client, auth)
    taken = client.post(f"/api/transactions/{ref}/queues/orders/dequeue", headers=auth,
                        json={"limit": 3}).json()  # fmt: skip
    first, second, third = (m["id"] for m in taken)
    assert client.post(f"/api/transactions/{ref}/messages/{first}/release",
                       headers=auth).status_code == 204  # fmt: skip
    assert db.queue("orders").stats()["ready"] == 1  # given back at once
    assert client.post(f"/api/transactions/{ref}/messages/{second}/reject", headers=auth,
                       json={"reason": "bad"}).status_code == 204  # fmt: skip
    problem(client.post(f"/api/transactions/{ref}/messages/{first}/release", headers=auth),
            404, "MessageNotHeld")  # fmt: skip
    client.post(f"/api/transactions/{ref}/queues/orders/messages", headers=auth,
                json={"messages": [{"body": {"n": 4}}]})  # fmt: skip
    assert client.post(f"/api/transactions/{ref}/abort", headers=auth).status_code == 204
    assert sorted(m.body["n"] for m in db.queue("orders").browse()) == [1, 2, 3]
    assert db.queue("bad").stats()["ready"] == 0  # the reject never happened
    assert third


def test_an_idle_transaction_expires_and_is_rolled_back(
    client: TestClient, db: sluice.Database, clock: ManualClock
) -> None:
    auth = key(db, "slow", "orders:consume,produce")
    db.queue("orders").put({"n": 1})
    ref = begin(client, auth, idle=30)
    client.post(f"/api/transactions/{ref}/queues/orders/dequeue", headers=auth, json={})
    client.post(f"/api/transactions/{ref}/queues/orders/messages", headers=auth,
                json={"messages": [{"body": {"n": 2}}]})  # fmt: skip
    clock.advance(29)  # each request moves the expiry on: 30 s from the last one
    assert client.get(f"/api/transactions/{ref}", headers=auth).json()["expires_at"] == (
        T0 + 29 + 30
    )
    transactions = client.app.state.transactions  # type: ignore[attr-defined]
    clock.advance(29)
    assert transactions.expire() == 0
    clock.advance(2)
    assert transactions.expire() == 1
    problem(client.post(f"/api/transactions/{ref}/commit", headers=auth), 404)
    assert [m.body for m in db.queue("orders").browse()] == [{"n": 1}]  # back, nothing new


def test_a_transaction_is_its_key_s_alone(client: TestClient, db: sluice.Database) -> None:
    mine = key(db, "mine", "orders:consume,produce")
    other = key(db, "other", "orders:consume,produce")
    ref = begin(client, mine)
    problem(client.get(f"/api/transactions/{ref}", headers=other), 404, "TransactionNotFound")
    problem(client.post(f"/api/transactions/{ref}/abort", headers=other), 404)
    assert client.get(f"/api/transactions/{ref}", headers=mine).status_code == 200
    problem(client.post(f"/api/transactions/{ref}/queues/invoices/messages", headers=mine,
                        json={"messages": [{"body": 1}]}), 403)  # fmt: skip


def test_an_open_transaction_keeps_other_clients_writing(
    client: TestClient, db: sluice.Database
) -> None:
    auth = key(db, "app", "orders:consume,produce")
    db.queue("orders").put({"n": 1})
    ref = begin(client, auth)
    client.post(f"/api/transactions/{ref}/queues/orders/dequeue", headers=auth, json={})
    client.post(f"/api/transactions/{ref}/queues/orders/messages", headers=auth,
                json={"messages": [{"body": {"n": 2}}]})  # fmt: skip
    # Meanwhile another client (here, this process's own API) writes and takes.
    db.queue("orders").put({"n": 3})
    got = db.queue("orders").get()
    assert got is not None
    assert got.body == {"n": 3}
    got.ack()
    sent = client.post("/api/queues/orders/messages", headers=auth,
                       json={"messages": [{"body": {"n": 5}}]})  # fmt: skip
    assert sent.status_code == 201
    assert client.post(f"/api/transactions/{ref}/commit", headers=auth).status_code == 204
    assert sorted(m.body["n"] for m in db.queue("orders").browse()) == [2, 5]
