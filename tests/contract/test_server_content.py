"""Message types and declared properties over HTTP (sluice.server.content), on every
backend: defined, read, used by enqueues and selections, refused without the grant."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sluice
from sluice import ManualClock

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from sluice.server.app import create_app
from tests.contract.test_server import T0, key, problem

ORDER = {
    "type": "object",
    "properties": {"customer": {"type": "string"}, "total": {"type": "number"}},
    "required": ["customer", "total"],
}


@pytest.fixture
def client(db: sluice.Database) -> Iterator[TestClient]:
    db.clock = ManualClock(T0)
    with TestClient(create_app(db)) as client:
        yield client


def test_a_message_type_is_defined_and_enforced(client: TestClient, db: sluice.Database) -> None:
    admin = key(db, "root", admin=True)
    made = client.post("/api/types", headers=admin, json={"name": "Order", "schema": ORDER})
    assert made.status_code == 201, made.text
    assert made.json()["definition"]["required"] == ["customer", "total"]
    reader = key(db, "reader", "orders:browse")
    assert client.get("/api/types", headers=reader).json()["Order"]["required"] == [
        "customer", "total"]  # fmt: skip
    assert client.post("/api/queues", headers=admin,
                       json={"name": "orders", "types": ["Order"]}).status_code == 201  # fmt: skip
    bad = {"messages": [{"body": {"customer": "Smith"}}]}
    problem(client.post("/api/queues/orders/messages", headers=admin, json=bad), 422)
    good = {"messages": [{"body": {"customer": "Smith", "total": 12.5}}]}
    assert client.post("/api/queues/orders/messages", headers=admin, json=good).status_code == 201

    problem(client.post("/api/types", headers=reader, json={"name": "X", "schema": ORDER}), 403)
    problem(client.post("/api/types", headers=admin, json={"name": "Y"}), 422)  # no definition
    problem(client.post("/api/types", headers=admin,
                        json={"name": "Z", "schema": {"type": "nonsense"}}), 422)  # fmt: skip
    problem(client.post("/api/types", headers=admin, json={"jpmq": "MESSAGETYPE"}), 422)
    problem(client.get("/api/types"), 401)


def test_a_property_is_declared_and_selects(client: TestClient, db: sluice.Database) -> None:
    db.create_queue("orders")
    manager = key(db, "ops", "orders:manage,produce,consume,browse")
    bodies = [{"customer": c, "total": t} for c, t in (("Smith", 5), ("Jones", 50), ("Smith", 7))]
    client.post("/api/queues/orders/messages", headers=manager,
                json={"messages": [{"body": b} for b in bodies]})  # fmt: skip
    new = {"name": "customer", "expression": "body.customer", "queues": ["orders"]}
    made = client.post("/api/properties", headers=manager, json=new)
    assert made.status_code == 201, made.text
    listed = client.get("/api/queues/orders/properties", headers=manager).json()
    assert listed == [{"name": "customer", "expression": "body.customer", "type": "text"}]
    # Messages already there got their value: a selection by the property finds them.
    taken = client.post("/api/queues/orders/leases", headers=manager,
                        json={"limit": 10, "where": "customer = 'Smith'"}).json()  # fmt: skip
    assert [m["body"]["total"] for m in taken["messages"]] == [5, 7]

    other = key(db, "other", "billing:manage")
    refused = {"name": "total", "expression": "body.total", "queues": ["orders"]}
    problem(client.post("/api/properties", headers=other, json=refused), 403)
    problem(client.get("/api/queues/orders/properties", headers=other), 403)
    problem(client.post("/api/properties", headers=manager,
                        json={**refused, "expression": "body.total >"}), 422)  # fmt: skip
    problem(client.post("/api/properties", headers=manager,
                        json={**refused, "expression": "(SELECT 1)"}), 422)  # fmt: skip
    admin = key(db, "root", admin=True)
    problem(client.get("/api/queues/nowhere/properties", headers=admin), 404, "QueueNotFound")
    problem(client.post("/api/properties", headers=admin,
                        json={**refused, "queues": ["nowhere"]}), 404)  # fmt: skip
