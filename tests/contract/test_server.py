"""The HTTP API (sluice.server) on every backend, in process through httpx's ASGI
transport (Starlette's TestClient): keys and grants on every route, queues, enqueue,
leases and their tokens, browse, and errors as problem documents."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import sluice
from sluice import ManualClock

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from sluice.server.app import create_app
from sluice.server.grants import REMEMBER, Grant, Keys

T0 = 1_800_000_000.0
PROBLEM = "application/problem+json"


def key(db: sluice.Database, name: str, *grants: str, admin: bool = False) -> dict[str, str]:
    secret = Keys(db).add(name, [Grant.parse(g) for g in grants], admin=admin)
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def client(db: sluice.Database, clock: ManualClock) -> Iterator[TestClient]:
    with TestClient(create_app(db, max_request=64 * 1024)) as client:
        yield client


@pytest.fixture
def admin(db: sluice.Database) -> dict[str, str]:
    return key(db, "root", admin=True)


def problem(response: Any, status: int, error: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    doc: dict[str, Any] = response.json()
    assert doc["status"] == status
    assert doc["title"]
    assert doc["detail"]
    if error is not None:
        assert doc["error"] == error
    return doc


ROUTES = [
    ("get", "/api/queues", None),
    ("post", "/api/queues", {"name": "x"}),
    ("get", "/api/queues/orders", None),
    ("patch", "/api/queues/orders", {"max_attempts": 3}),
    ("delete", "/api/queues/orders", None),
    ("post", "/api/queues/orders/pause", None),
    ("post", "/api/queues/orders/resume", None),
    ("post", "/api/queues/orders/messages", {"messages": [{"body": 1}]}),
    ("get", "/api/queues/orders/messages", None),
    ("post", "/api/queues/orders/leases", {}),
    ("post", "/api/leases/abc/ack", None),
    ("post", "/api/leases/abc/release", None),
    ("post", "/api/leases/abc/reject", {"reason": "r"}),
    ("post", "/api/leases/abc/extend", {"seconds": 5}),
    ("post", "/api/queues/orders/purge", {"state": "ready"}),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_every_route_asks_for_a_key(
    client: TestClient, db: sluice.Database, method: str, path: str, body: Any
) -> None:
    db.create_queue("orders")
    kwargs: dict[str, Any] = {} if body is None else {"json": body}
    problem(client.request(method, path, **kwargs), 401, "Unauthorized")
    bad = {"Authorization": "Bearer sk_not-a-key"}
    problem(client.request(method, path, headers=bad, **kwargs), 401, "Unauthorized")
    basic = {"Authorization": "Basic eDp4"}
    assert client.request(method, path, headers=basic, **kwargs).status_code == 401
    assert db.queue("orders").stats()["ready"] == 0  # nothing done


@pytest.mark.parametrize(("method", "path", "body"), ROUTES[1:10])
def test_a_key_without_the_grant_is_forbidden(
    client: TestClient, db: sluice.Database, method: str, path: str, body: Any
) -> None:
    db.create_queue("orders")
    other = key(db, "other", "invoices*:produce,consume,browse,manage")
    kwargs: dict[str, Any] = {} if body is None else {"json": body}
    problem(client.request(method, path, headers=other, **kwargs), 403, "Forbidden")
    assert [s.name for s in db.queues()] == ["orders"]
    assert db.queue("orders").stats()["ready"] == 0


def test_a_key_revoked_elsewhere_is_refused_within_remember(
    client: TestClient, db: sluice.Database, clock: ManualClock
) -> None:
    headers = key(db, "app", "orders:produce")
    db.create_queue("orders")
    assert client.post("/api/queues/orders/messages", headers=headers,
                       json={"messages": [{"body": 1}]}).status_code == 201  # fmt: skip
    Keys(db).revoke("app")  # as `sluice keys revoke` or another server would
    clock.advance(REMEMBER)
    problem(client.get("/api/queues/orders", headers=headers), 401)


def test_a_key_revoked_through_the_server_is_refused_at_once(
    client: TestClient, db: sluice.Database
) -> None:
    headers = key(db, "app", "orders:produce")
    db.create_queue("orders")
    assert client.get("/api/queues/orders", headers=headers).status_code == 200
    client.app.state.gate.keys.revoke("app")  # type: ignore[attr-defined]
    problem(client.get("/api/queues/orders", headers=headers), 401)


def test_a_key_is_remembered_for_a_while_then_read_again(
    client: TestClient, db: sluice.Database, clock: ManualClock
) -> None:
    headers = key(db, "app", "orders:browse")
    db.create_queue("orders")
    keys: Keys = client.app.state.gate.keys  # type: ignore[attr-defined]
    assert client.get("/api/queues/orders/messages", headers=headers).status_code == 200
    secret = headers["Authorization"].removeprefix("Bearer ")
    assert keys.remembered(secret) is not None
    clock.advance(REMEMBER)
    assert keys.remembered(secret) is None  # past its time: the store is asked again
    assert keys.remembered("sk_nobody") is None  # unknown secrets are never remembered


def test_an_admin_manages_queues(client: TestClient, admin: dict[str, str]) -> None:
    new = {"name": "orders", "max_attempts": 2, "error_queue": "bad"}
    made = client.post("/api/queues", headers=admin, json=new)
    assert made.status_code == 201, made.text
    assert made.headers["location"] == "/api/queues/orders"
    assert made.json()["max_attempts"] == 2
    problem(client.post("/api/queues", headers=admin, json={"name": "orders"}), 409, "QueueExists")
    again = client.post("/api/queues", headers=admin, json={"name": "orders", "exist_ok": True})
    assert again.status_code == 201
    changed = client.patch("/api/queues/orders", headers=admin, json={"max_attempts": 5})
    assert changed.json()["max_attempts"] == 5
    names = [q["name"] for q in client.get("/api/queues", headers=admin).json()]
    assert names == ["bad", "orders"]
    one = client.get("/api/queues/orders", headers=admin).json()
    assert one["counts"]["ready"] == 0
    assert client.delete("/api/queues/orders", headers=admin).status_code == 204
    problem(client.get("/api/queues/orders", headers=admin), 404, "QueueNotFound")
    problem(client.delete("/api/queues/orders", headers=admin), 404, "QueueNotFound")


def test_pause_and_resume_a_queue(client: TestClient, db: sluice.Database) -> None:
    db.create_queue("orders")
    ops = key(db, "ops", "orders:manage,browse")
    app = key(db, "app", "orders:produce,consume,browse")
    for route in ("pause", "resume"):  # consuming or browsing is not managing
        problem(client.post(f"/api/queues/orders/{route}", headers=app), 403, "Forbidden")
    assert client.get("/api/queues/orders", headers=app).json()["paused"] is False
    paused = client.post("/api/queues/orders/pause", headers=ops)
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] is True
    assert db.queue("orders").paused
    sent = client.post("/api/queues/orders/messages", headers=app, json={"messages": [{"body": 1}]})
    assert sent.status_code == 201  # producers go on
    taken = client.post("/api/queues/orders/leases", headers=app, json={})
    assert taken.json()["messages"] == []
    assert [m["body"] for m in client.get("/api/queues/orders/messages", headers=app).json()] == [1]
    (listed,) = client.get("/api/queues", headers=app).json()
    assert (listed["paused"], listed["counts"]["ready"]) == (True, 1)
    resumed = client.post("/api/queues/orders/resume", headers=ops)
    assert resumed.json()["paused"] is False
    (m,) = client.post("/api/queues/orders/leases", headers=app, json={}).json()["messages"]
    assert m["body"] == 1
    admin = key(db, "root", admin=True)
    for route in ("pause", "resume"):
        problem(client.post(f"/api/queues/nope/{route}", headers=admin), 404, "QueueNotFound")


def test_purge_a_queue(client: TestClient, db: sluice.Database) -> None:
    q = db.create_queue("orders")
    q.put_many([1, 2])
    q.put(3, delay=3600)
    q.put(4)
    held = q.get()  # 1
    assert held is not None
    ops = key(db, "ops", "orders:manage")
    app = key(db, "app", "orders:produce,consume,browse")
    ready = {"state": "ready"}
    problem(client.post("/api/queues/orders/purge", headers=app, json=ready), 403, "Forbidden")
    purged = client.post("/api/queues/orders/purge", headers=ops, json=ready)
    assert purged.status_code == 200, purged.text
    assert purged.json() == {"purged": 3}  # 2 and 4 ready, 3 delayed; 1 held stays
    assert q.stats()["claimed"] == 1
    held.ack()
    kept = client.post("/api/queues/orders/purge", headers=ops, json={"state": "failed"})
    assert kept.json() == {"purged": 0}
    bad = client.post("/api/queues/orders/purge", headers=ops, json={"state": "claimed"})
    problem(bad, 422)
    admin = key(db, "root", admin=True)
    problem(client.post("/api/queues/nope/purge", headers=admin, json=ready), 404, "QueueNotFound")


def test_a_key_lists_only_the_queues_it_has_grants_on(
    client: TestClient, db: sluice.Database
) -> None:
    for name in ("orders", "orders-eu", "invoices"):
        db.create_queue(name)
    headers = key(db, "app", "orders*:browse")
    names = [q["name"] for q in client.get("/api/queues", headers=headers).json()]
    assert names == ["orders", "orders-eu"]


def test_enqueue_lease_and_settle_by_token(
    client: TestClient, db: sluice.Database, admin: dict[str, str]
) -> None:
    db.create_queue("orders", error_queue="bad")
    app = key(db, "app", "orders:produce,consume,browse")
    sent = client.post("/api/queues/orders/messages", headers=app, json={"messages": [
        {"body": {"n": 1}, "properties": {"region": "eu"}},
        {"body": {"n": 2}, "priority": 5},
        {"body": {"n": 3}},
    ]})  # fmt: skip
    assert sent.status_code == 201, sent.text
    assert len(sent.json()["ids"]) == 3
    taken = client.post("/api/queues/orders/leases", headers=app, json={"limit": 3, "lease": 60})
    messages = taken.json()["messages"]
    assert [m["body"]["n"] for m in messages] == [2, 1, 3]  # priority first
    assert messages[1]["properties"] == {"region": "eu"}
    assert all(m["lease_expires"] == T0 + 60 for m in messages)
    assert db.queue("orders").stats()["claimed"] == 3
    tokens = [m["token"] for m in messages]
    assert client.post(f"/api/leases/{tokens[0]}/ack", headers=app).status_code == 204
    assert client.post(f"/api/leases/{tokens[1]}/release", headers=app).status_code == 204
    rejected = client.post(f"/api/leases/{tokens[2]}/reject", headers=app, json={"reason": "no"})
    assert rejected.status_code == 204
    for token in tokens:  # settled: every token is stale now
        problem(client.post(f"/api/leases/{token}/ack", headers=app), 410, "LeaseEnded")
    counts = db.queue("orders").stats()
    assert (counts["ready"], counts["claimed"]) == (1, 0)
    (back,) = db.queue("orders").browse()
    assert (back.body, back.attempts) == ({"n": 1}, 1)
    (failed,) = db.queue("bad").browse()
    assert failed.body == {"n": 3}


def test_a_lease_that_runs_out_gives_its_message_back(
    client: TestClient, db: sluice.Database, clock: ManualClock
) -> None:
    db.create_queue("orders")
    app = key(db, "app", "orders:produce,consume")
    db.queue("orders").put({"n": 1})
    (m,) = client.post("/api/queues/orders/leases", headers=app,
                       json={"lease": 30}).json()["messages"]  # fmt: skip
    extended = client.post(f"/api/leases/{m['token']}/extend", headers=app, json={"seconds": 45})
    assert extended.json()["lease_expires"] == T0 + 45
    clock.advance(44)
    assert client.app.state.leases.expire() == 0  # type: ignore[attr-defined]
    clock.advance(2)
    assert client.app.state.leases.expire() == 1  # type: ignore[attr-defined]
    problem(client.post(f"/api/leases/{m['token']}/ack", headers=app), 410, "LeaseEnded")
    (again,) = client.post("/api/queues/orders/leases", headers=app, json={}).json()["messages"]
    assert again["id"] == m["id"]
    assert again["attempts"] == 1  # the lease that ran out counted as a delivery


def test_a_token_of_another_queue_needs_that_queue_s_grant(
    client: TestClient, db: sluice.Database
) -> None:
    db.create_queue("orders")
    db.queue("orders").put(1)
    owner = key(db, "owner", "orders:consume")
    stranger = key(db, "stranger", "invoices:consume")
    (m,) = client.post("/api/queues/orders/leases", headers=owner, json={}).json()["messages"]
    problem(client.post(f"/api/leases/{m['token']}/ack", headers=stranger), 403)
    assert client.post(f"/api/leases/{m['token']}/ack", headers=owner).status_code == 204


def test_a_long_poll_returns_when_a_message_arrives(
    client: TestClient, db: sluice.Database
) -> None:
    db.create_queue("orders")
    app = key(db, "app", "orders:consume")
    answers: list[Any] = []

    def poll() -> None:
        began = time.monotonic()
        r = client.post("/api/queues/orders/leases", headers=app, json={"wait": 15})
        answers.append((r.json()["messages"], time.monotonic() - began))

    thread = threading.Thread(target=poll)
    thread.start()
    db.queue("orders").put({"n": 1})
    thread.join(timeout=30)
    ((messages, took),) = answers
    assert [m["body"] for m in messages] == [{"n": 1}]
    assert took < 15


def test_bodies_of_every_kind_round_trip(client: TestClient, db: sluice.Database) -> None:
    db.create_queue("inbox")
    app = key(db, "app", "inbox:produce,consume")
    sent = client.post("/api/queues/inbox/messages", headers=app, json={"messages": [
        {"body": "plain text", "content_type": "text/plain"},
        {"body": "<a>1</a>", "content_type": "application/xml"},
        {"body_base64": "AAEC/w==", "content_type": "application/octet-stream"},
        {"body": [1, "two", None]},
    ]})  # fmt: skip
    assert sent.status_code == 201, sent.text
    got = client.post("/api/queues/inbox/leases", headers=app, json={"limit": 10}).json()
    shapes = [(m["body"], m["body_base64"], m["content_type"]) for m in got["messages"]]
    assert shapes == [
        ("plain text", None, "text/plain"),
        ("<a>1</a>", None, "application/xml"),
        (None, "AAEC/w==", "application/octet-stream"),
        ([1, "two", None], None, "application/json"),
    ]


def test_browse_selects_and_pages(client: TestClient, db: sluice.Database) -> None:
    db.create_queue("orders")
    db.queue("orders").put_many([{"n": n} for n in range(6)])
    reader = key(db, "reader", "orders:browse")
    page = client.get("/api/queues/orders/messages", headers=reader,
                      params={"where": "body.n >= 2", "limit": 2}).json()  # fmt: skip
    assert [m["body"]["n"] for m in page] == [2, 3]
    after = page[-1]["position"]
    more = client.get("/api/queues/orders/messages", headers=reader,
                      params={"where": "body.n >= 2", "after": after}).json()  # fmt: skip
    assert [m["body"]["n"] for m in more] == [4, 5]
    assert db.queue("orders").stats()["ready"] == 6  # browsing took nothing


def test_an_expression_error_says_where_in_fields_of_its_own(
    client: TestClient, db: sluice.Database, admin: dict[str, str]
) -> None:
    db.create_queue("orders")
    wrong = client.get("/api/queues/orders/messages", headers=admin,
                       params={"where": "body.total >== 1000"})  # fmt: skip
    found = problem(wrong, 422, "ExpressionError")
    assert (found["expression"], found["line"], found["column"]) == ("body.total >== 1000", 1, 12)
    assert found["position"] == 11
    assert found["expected"] == [">="]
    assert found["reason"] == "'>==' is not an operator: did you mean '>='?"
    assert "sqlglot" not in found["detail"]


def test_bad_input_gets_a_problem_and_changes_nothing(
    client: TestClient, db: sluice.Database, admin: dict[str, str]
) -> None:
    db.create_queue("orders", max_size=100)
    post = "/api/queues/orders/messages"
    raw = {**admin, "content-type": "application/json"}
    problem(client.post(post, headers=raw, content=b'{"messages": [{"body": '), 422)
    problem(client.post(post, headers=admin, json={"messages": []}), 422)
    problem(client.post(post, headers=admin, json={"messages": [{"body": 1, "bogus": 2}]}), 422)
    big = {"messages": [{"body": "x" * 200}, {"body": 1}]}
    problem(client.post(post, headers=admin, json=big), 413, "PayloadTooLarge")
    problem(client.post(post, headers=admin,
                        json={"messages": [{"body": "x", "content_type": "text/plain"},
                                           {"body": {"a": 1}, "content_type": "text/plain"}]}),
            422)  # fmt: skip
    problem(client.post(post, headers=admin, json={"messages": [{"body_base64": "%%%"}]}), 422)
    problem(client.post("/api/queues/nowhere/messages", headers=admin,
                        json={"messages": [{"body": 1}]}), 404, "QueueNotFound")  # fmt: skip
    problem(client.post("/api/queues/orders/leases", headers=admin,
                        json={"where": "body.n >"}), 422, "ExpressionError")  # fmt: skip
    problem(client.post("/api/queues/orders/leases", headers=admin,
                        json={"where": "(SELECT 1 FROM messages)"}), 422)  # fmt: skip
    problem(client.post("/api/queues/orders/leases", headers=admin, json={"wait": 60}), 422)
    problem(client.post(post, headers=admin, content=b"x" * (65 * 1024)), 413, "PayloadTooLarge")
    assert db.queue("orders").stats()["ready"] == 0  # all or nothing: nothing


def test_the_openapi_document_describes_the_api(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    assert doc["info"]["title"] == "sluice"
    for path in ("/api/queues", "/api/queues/{name}/messages", "/api/queues/{name}/leases",
                 "/api/queues/{name}/pause", "/api/queues/{name}/resume",
                 "/api/leases/{token}/ack"):  # fmt: skip
        assert path in doc["paths"]


def test_the_enqueue_body_is_in_the_openapi_document(client: TestClient) -> None:
    # The enqueue route reads its body itself (server/models.read_body): its schema is
    # declared by hand, and every reference in it must resolve.
    doc = client.get("/openapi.json").json()
    body = doc["paths"]["/api/queues/{name}/messages"]["post"]["requestBody"]
    ref = body["content"]["application/json"]["schema"]["$ref"]
    schemas = doc["components"]["schemas"]
    assert ref == "#/components/schemas/Enqueue"
    assert "messages" in schemas["Enqueue"]["properties"]
    text = json.dumps(doc)
    for name in re.findall(r'"#/components/schemas/([^"]+)"', text):
        assert name in schemas, name


def test_an_enqueue_body_that_is_not_json_is_refused(
    client: TestClient, db: sluice.Database, admin: dict[str, str]
) -> None:
    db.create_queue("orders")
    post = "/api/queues/orders/messages"
    text = {**admin, "content-type": "text/plain"}
    problem(client.post(post, headers=text, content=b'{"messages": []}'), 422, "InvalidRequest")
    problem(client.post(post, headers=admin, content=b'{"messages": [}'), 422, "InvalidRequest")
    problem(client.post(post, headers=admin, content=b"\xff\xfe"), 422, "InvalidRequest")
    wrong = client.post(post, headers=admin, json={"messages": [{"body": 1, "priority": "x"}]})
    assert problem(wrong, 422, "InvalidRequest")["errors"][0]["where"].startswith("body.")
    assert db.queue("orders").stats()["ready"] == 0


def test_a_missing_queue_is_said_in_the_words_of_http(
    client: TestClient, db: sluice.Database, admin: dict[str, str]
) -> None:
    # It said "create it with db.create_queue('ordrs')": Python, to an HTTP client.
    db.create_queue("orders")
    db.create_topic("events")
    for answer in (
        client.get("/api/queues/ordrs", headers=admin),
        # The hot enqueue, answered before FastAPI's routing, too.
        client.post("/api/queues/ordrs/messages", headers=admin, json={"messages": [{"body": 1}]}),
        client.post("/api/queues/ordrs/leases", headers=admin, json={}),
    ):
        detail = problem(answer, 404, "QueueNotFound")["detail"]
        assert detail.startswith("queue 'ordrs' does not exist")
        assert "did you mean 'orders'?" in detail
        assert detail.endswith('create it with POST /api/queues {"name": "ordrs"}')
        assert "db." not in detail
    subscribed = client.post("/api/topics/evnts/subscriptions", headers=admin,
                             json={"name": "audit"})  # fmt: skip
    detail = problem(subscribed, 404, "QueueNotFound")["detail"]
    assert "topic 'evnts' does not exist" in detail
    assert "did you mean 'events'?" in detail
    assert detail.endswith('create it with POST /api/topics {"name": "evnts"}')


def test_null_in_a_change_puts_a_setting_back_to_its_default(
    client: TestClient, db: sluice.Database, admin: dict[str, str]
) -> None:
    # The document allows null for every setting; durability and max_size refused it.
    db.create_queue("orders", durability="transient", max_size=100, max_attempts=2)
    for change in ({"durability": None}, {"max_size": None}, {"max_attempts": None}):
        answer = client.patch("/api/queues/orders", headers=admin, json=change)
        assert answer.status_code == 200, answer.text
    spec = db.queue("orders").spec
    default = sluice.QueueSpec("x")
    assert (spec.durability, spec.max_size, spec.max_attempts) == (
        default.durability, default.max_size, default.max_attempts,
    )  # fmt: skip
    assert client.patch("/api/queues/orders", headers=admin, json={}).status_code == 200
    assert db.queue("orders").spec == spec  # what is left out stays
