"""The hot routes (sluice.server.hot): enqueue and ack answered without FastAPI's routing,
on every backend. They must be indistinguishable from the routes that document them:
the same problem documents, the same size limit, the same metrics labels, the same
OpenAPI; and a path that only looks like theirs goes on to FastAPI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sluice
from sluice import ManualClock

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from sluice.server import messages
from sluice.server.app import create_app
from sluice.server.grants import Grant, Keys
from sluice.server.offload import Offload

Labels = frozenset[tuple[str, str]]


def key(db: sluice.Database, name: str, *grants: str, admin: bool = False) -> dict[str, str]:
    secret = Keys(db).add(name, [Grant.parse(g) for g in grants], admin=admin)
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def client(db: sluice.Database, clock: ManualClock) -> Iterator[TestClient]:
    db.create_queue("orders")
    with TestClient(create_app(db, max_request=4096)) as client:
        yield client


@pytest.fixture
def admin(db: sluice.Database) -> dict[str, str]:
    return key(db, "root", admin=True)


def timed(client: TestClient, admin: dict[str, str]) -> dict[Labels, float]:
    """The request counts of the HTTP histogram, by label set."""
    text = client.get("/metrics", headers=admin).text
    return {
        frozenset(s.labels.items()): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "sluice_http_request_duration_seconds_count"
    }


def test_every_hot_route_is_documented(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for hot in messages.HOT:
        assert hot.method.lower() in paths[hot.template]


def test_hot_routes_are_timed_under_their_templates(
    db: sluice.Database, client: TestClient, admin: dict[str, str]
) -> None:
    one = {"messages": [{"body": {"n": 1}}]}
    assert client.post("/api/queues/orders/messages", json=one, headers=admin).status_code == 201
    assert client.post("/api/queues/nowhere/messages", json=one, headers=admin).status_code == 404
    taken = client.post("/api/queues/orders/leases", json={"limit": 1}, headers=admin).json()
    token = taken["messages"][0]["token"]
    assert client.post(f"/api/leases/{token}/ack", headers=admin).status_code == 204
    assert client.post(f"/api/leases/{token}/ack", headers=admin).status_code == 410

    counts = timed(client, admin)

    def at(route: str, status: str) -> float:
        return counts[frozenset({"method": "POST", "route": route, "status": status}.items())]

    assert at("/api/queues/{name}/messages", "201") == 1
    assert at("/api/queues/{name}/messages", "404") == 1
    assert at("/api/leases/{token}/ack", "204") == 1
    assert at("/api/leases/{token}/ack", "410") == 1


def test_hot_errors_are_the_apps_problem_documents(
    db: sluice.Database, client: TestClient, admin: dict[str, str]
) -> None:
    path = "/api/queues/orders/messages"
    anonymous = client.post(path, json={"messages": [{"body": 1}]})
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert anonymous.headers["content-type"] == "application/problem+json"
    reader = key(db, "reader", "orders:browse")
    refused = client.post(path, json={"messages": [{"body": 1}]}, headers=reader)
    assert (refused.status_code, refused.json()["error"]) == (403, "Forbidden")
    invalid = client.post(path, json={"messages": [{"bdy": 1}]}, headers=admin)
    assert invalid.status_code == 422
    assert invalid.json()["errors"][0]["where"].startswith("body.messages.0")
    text = client.post(path, content=b"{nope", headers={**admin, "content-type": "text/plain"})
    assert text.status_code == 422
    too_big = {"messages": [{"body": "x" * 5000}]}
    assert client.post(path, json=too_big, headers=admin).status_code == 413
    missing = client.post("/api/queues/nowhere/messages", json={"messages": [{"body": 1}]},
                          headers=admin)  # fmt: skip
    assert (missing.status_code, missing.json()["error"]) == (404, "QueueNotFound")
    # Nothing of the refused requests went in.
    assert db.queue("orders").stats()["ready"] == 0


def test_other_methods_and_longer_paths_go_on_to_fastapi(
    client: TestClient, admin: dict[str, str]
) -> None:
    # GET on the enqueue path is browse; a longer path is no route; a name with a slash
    # cannot be a queue's: none of them is the hot route's.
    assert client.get("/api/queues/orders/messages", headers=admin).status_code == 200
    refused = client.post("/api/queues/orders/messages/more", json={}, headers=admin)
    assert refused.status_code in (404, 405)
    assert client.post("/api/queues/a/b/messages", json={}, headers=admin).status_code == 404


def test_a_batch_with_several_options_is_one_transaction(
    db: sluice.Database, client: TestClient, admin: dict[str, str]
) -> None:
    mixed = {"messages": [{"body": 1}, {"body": 2, "priority": 5}, {"body": 3}]}
    done = client.post("/api/queues/orders/messages", json=mixed, headers=admin)
    assert done.status_code == 201
    assert len(done.json()["ids"]) == 3
    # The third is not what its content type says: the whole batch is refused.
    bad = {"messages": [{"body": 4}, {"body": {"a": 1}, "content_type": "text/plain"}]}
    refused = client.post("/api/queues/orders/messages", json=bad, headers=admin)
    assert (refused.status_code, refused.json()["error"]) == (422, "InvalidBody")
    assert db.queue("orders").stats()["ready"] == 3


def test_offload_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="a thread or more"):
        Offload(0)
