"""Hostile input to the HTTP API, each found by schemathesis (test_server_schema.py) or
by hand: every one is answered with a 4xx problem document, never a 500 or a hang."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import sluice
from sluice import ManualClock

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from sluice.server.app import create_app
from sluice.server.models import MAX_DEPTH
from tests.contract.test_server import T0, key, problem

JSON = {"content-type": "application/json"}


@pytest.fixture
def client(db: sluice.Database) -> Iterator[TestClient]:
    db.clock = ManualClock(T0)
    db.create_queue("orders")
    with TestClient(create_app(db, max_request=64 * 1024)) as client:
        yield client


@pytest.fixture
def admin(db: sluice.Database) -> dict[str, str]:
    return key(db, "root", admin=True)


@pytest.mark.parametrize(
    "after", ["9223372036854775808:1", "1:9223372036854775808", "-9223372036854775809:0"]
)
def test_browsing_after_a_position_beyond_64_bits_is_refused(
    client: TestClient, admin: dict[str, str], after: str
) -> None:
    # It was a 500: the database cannot bind the number (OverflowError).
    found = client.get("/api/queues/orders/messages", headers=admin, params={"after": after})
    assert "64-bit" in problem(found, 422, "ConfigurationError")["detail"]


def test_browsing_after_the_last_64_bit_position_finds_nothing(
    client: TestClient, admin: dict[str, str]
) -> None:
    found = client.get("/api/queues/orders/messages", headers=admin,
                       params={"after": "9223372036854775807:9223372036854775807"})  # fmt: skip
    assert found.status_code == 200
    assert found.json() == []


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("field", ["body", "properties"])
def test_a_message_nested_deeper_than_the_limit_is_refused(
    client: TestClient, db: sluice.Database, admin: dict[str, str], field: str
) -> None:
    # A body of 300 levels was taken, and then every lease of it was a 500 (the answer
    # could not be serialized) while the message stayed leased: a poison message.
    deep = _nested(300) if field == "body" else '{"a": ' + _nested(300) + "}"
    sent = client.post("/api/queues/orders/messages", headers={**admin, **JSON},
                       content=f'{{"messages": [{{"body": 1, "{field}": {deep}}}]}}')  # fmt: skip
    doc = problem(sent, 422, "InvalidRequest")
    # Refused by our limit, or first by the JSON parser's own (the enqueue route
    # parses its body with pydantic's, which stops at a depth of its own).
    limits = (f"deeper than {MAX_DEPTH} levels", "recursion limit exceeded")
    assert any(limit in doc["detail"] for limit in limits), doc["detail"]
    assert db.queue("orders").stats()["ready"] == 0


def test_a_message_nested_to_the_limit_is_enqueued_and_leased(
    client: TestClient, admin: dict[str, str]
) -> None:
    body = f'{{"messages": [{{"body": {_nested(MAX_DEPTH)}}}]}}'
    sent = client.post("/api/queues/orders/messages", headers={**admin, **JSON}, content=body)
    assert sent.status_code == 201, sent.text
    leased = client.post("/api/queues/orders/leases", headers=admin, json={})
    assert leased.status_code == 200, leased.text
    assert len(leased.json()["messages"]) == 1


def test_a_job_nested_deeper_than_the_limit_is_refused(
    client: TestClient, admin: dict[str, str]
) -> None:
    body = f'{{"name": "j", "tasks": [{{"type": "t"}}], "info": {_nested(300)}}}'
    sent = client.post("/api/jobs", headers={**admin, **JSON}, content=body)
    assert "info" in problem(sent, 422, "InvalidRequest")["detail"]


@pytest.mark.parametrize("depth", [990, 5000])
def test_json_nested_past_the_parser_is_refused(
    client: TestClient, admin: dict[str, str], depth: int
) -> None:
    sent = client.post("/api/queues/orders/messages", headers={**admin, **JSON},
                       content=f'{{"messages": [{{"body": {_nested(depth)}}}]}}')  # fmt: skip
    # The enqueue route parses its own body (models.read_body): 422, as for other bad JSON.
    problem(sent, 422, "InvalidRequest")


@pytest.mark.parametrize(
    ("field", "value"), [("exist_ok", '"true"'), ("exist_ok", "1"), ("max_size", '"5"')]
)
def test_a_value_of_another_json_type_than_declared_is_refused(
    client: TestClient, db: sluice.Database, admin: dict[str, str], field: str, value: str
) -> None:
    # "true" for a boolean was taken (schemathesis: schema-violating request accepted).
    sent = client.post("/api/topics", headers={**admin, **JSON},
                       content=f'{{"name": "news", "{field}": {value}}}')  # fmt: skip
    assert field in problem(sent, 422, "InvalidRequest")["detail"]
    assert [s.name for s in db.queues()] == ["orders"]


@pytest.mark.parametrize(
    "where", ["body.n" + " + 1" * 45 + " > 0", "abs(" * 15 + "body.n" + ")" * 15 + " > 0"]
)
def test_a_selector_too_deep_for_sqlite_is_refused(
    client: TestClient, admin: dict[str, str], backend_url: str, where: str
) -> None:
    # It was a 503 (the database failed to parse its statement): retrying never helps.
    if not backend_url.startswith(("sqlite", "memory")):
        pytest.skip("SQLite's parser stack; PostgreSQL's is deeper")
    client.post("/api/queues/orders/messages", headers=admin,
                json={"messages": [{"body": {"n": 1}}]})  # fmt: skip
    leased = client.post("/api/queues/orders/leases", headers=admin, json={"where": where})
    assert "nests too deeply" in problem(leased, 422, "ExpressionError")["detail"]
    browsed = client.get("/api/queues/orders/messages", headers=admin, params={"where": where})
    problem(browsed, 422, "ExpressionError")
    ordered = client.post("/api/queues/orders/leases", headers=admin,
                          json={"order_by": [where.removesuffix(" > 0")]})  # fmt: skip
    problem(ordered, 422, "ExpressionError")


def test_a_method_a_path_does_not_have_names_every_one_it_has(
    client: TestClient, admin: dict[str, str]
) -> None:
    # The Allow header was dropped from the problem document; then it named only the
    # first route's method (GET) of a path that has GET, PATCH and DELETE.
    refused = client.request("TRACE", "/api/queues/orders", headers=admin)
    problem(refused, 405, "MethodNotAllowed")
    assert refused.headers["allow"] == "DELETE, GET, PATCH"


def test_a_path_no_route_has_is_a_problem_document(
    client: TestClient, admin: dict[str, str]
) -> None:
    problem(client.get("/api/nowhere", headers=admin), 404, "NotFound")


@pytest.mark.parametrize(
    ("label", "content", "content_type"),
    [
        ("malformed JSON", b'{"messages": [', "application/json"),
        ("not UTF-8", b'{"messages": [{"body": "\xff\xfe"}]}', "application/json"),
        ("a text content type", b'{"messages": [{"body": 1}]}', "text/plain"),
        ("a form", b"messages=1", "application/x-www-form-urlencoded"),
        ("an array", b"[1, 2]", "application/json"),
        ("a huge integer", b'{"messages": [{"body": 1' + b"0" * 5000 + b"}]}", "application/json"),
    ],
)
def test_a_body_that_is_not_the_json_object_asked_for_is_refused(
    client: TestClient, admin: dict[str, str], label: str, content: bytes, content_type: str
) -> None:
    headers = {**admin, "content-type": content_type}
    sent = client.post("/api/queues/orders/messages", headers=headers, content=content)
    assert sent.status_code in (400, 422), label
    problem(sent, sent.status_code)


@pytest.mark.parametrize("name", ["..", "a" * 5000, "名前", "a%00b", "-x"])
def test_hostile_queue_names_in_paths_are_refused(
    client: TestClient, admin: dict[str, str], name: str
) -> None:
    for method, path, body in [
        ("get", f"/api/queues/{name}", None),
        ("post", f"/api/queues/{name}/messages", {"messages": [{"body": 1}]}),
        ("get", f"/api/queues/{name}/messages", None),
        ("post", f"/api/queues/{name}/leases", {}),
        ("delete", f"/api/queues/{name}", None),
    ]:
        answer = client.request(method, path, headers=admin, json=body)
        assert 400 <= answer.status_code < 500, (method, path, answer.text)
        problem(answer, answer.status_code)


@pytest.mark.parametrize(
    ("field", "value"),
    [("priority", 2**63), ("priority", -(2**70)), ("delay", 10**400), ("ttl", 10**400)],
)
def test_numbers_beyond_range_are_refused(
    client: TestClient, admin: dict[str, str], field: str, value: int
) -> None:
    sent = client.post("/api/queues/orders/messages", headers={**admin, **JSON},
                       content=f'{{"messages": [{{"body": 1, "{field}": {value}}}]}}')  # fmt: skip
    problem(sent, 422)


@pytest.mark.parametrize("limit", ["-1", "0", "99999999999999999999999"])
def test_limits_out_of_range_are_refused(
    client: TestClient, admin: dict[str, str], limit: str
) -> None:
    problem(client.get(f"/api/queues/orders/messages?limit={limit}", headers=admin), 422)
    problem(client.post("/api/queues/orders/leases", headers={**admin, **JSON},
                        content=f'{{"limit": {limit}}}'), 422)  # fmt: skip


def test_a_query_parameter_an_operation_does_not_take_is_refused_and_named(
    client: TestClient, admin: dict[str, str]
) -> None:
    # It was ignored: a misspelt ?limt=1 answered as if no limit had been asked for, and
    # schemathesis found ?%20%00=... on /api/jobs accepted.
    sent = client.post(
        "/api/queues/orders/messages", headers=admin, json={"messages": [{"body": 1}]}
    )
    assert sent.status_code == 201, sent.text
    misspelt = problem(
        client.get("/api/queues/orders/messages", headers=admin, params={"limt": "1"}),
        422,
        "InvalidRequest",
    )
    assert misspelt["errors"] == [
        {"where": "query.limt",
         "what": "not a parameter of this operation, which takes after, limit, where"}
    ]  # fmt: skip
    hostile = client.get("/api/jobs", headers=admin, params={" \x00": "x"})
    assert problem(hostile, 422, "InvalidRequest")["errors"][0]["where"] == "query. \x00"
    none = problem(client.get("/api/queues", headers=admin, params={"x": "1"}), 422)
    assert "takes no query parameters" in none["detail"]
    # What an operation does take still works; a key is asked for before anything else.
    taken = client.get("/api/queues/orders/messages", headers=admin, params={"limit": "1"})
    assert taken.status_code == 200
    assert len(taken.json()) == 1
    assert client.get("/api/queues", params={"x": "1"}).status_code == 401
