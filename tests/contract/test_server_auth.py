"""Keys before anything else: every route of the app's route table answers a request
without a valid key 401, whatever its body, query or origin (FastAPI parsed a route's
JSON body before its key was asked, so such a request was told 422); the OpenAPI
document declares how the key is sent; a key the server does not know is told why it
may be so, without naming any key."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

import sluice

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from sluice.server.app import BEARER, create_app
from sluice.server.console.access import COOKIE
from sluice.server.grants import Grant, Keys
from tests.reliability.security_routes import PUBLIC, endpoints

BODIES = [
    (b"{not json", "application/json"),
    (b'{"messages": [{"body": "\xff\xfe"}]}', "application/json"),
    (b"[1, 2]", "application/json"),
    (b"all=yes&at=x", "application/x-www-form-urlencoded"),
    (b"\x00\x01", "application/octet-stream"),
]
"""Bodies no route takes as they are: each route must not look at them without a key."""

REFUSED_KEYS = [
    {},
    {"Authorization": "Bearer sk_not-a-key"},
    {"Authorization": "Bearer "},
    {"Authorization": "Basic eDp5"},
    {"Cookie": f"{COOKIE}=sk_not-a-key"},
]


@pytest.fixture
def db() -> Iterator[sluice.Database]:
    # The keys are checked before the backend is asked anything else: one backend does.
    with sluice.connect("memory://") as database:
        yield database


def filled(template: str) -> str:
    """A path of the route ``template``, each parameter a plausible value."""
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: "orders" if m[1] == "name" else "x", template)


def keyed_routes(http: TestClient) -> list[tuple[str, str]]:
    found, _ = endpoints(http.app)  # type: ignore[arg-type]
    return sorted(found - PUBLIC.keys())


def test_every_route_answers_401_before_it_reads_anything(db: sluice.Database) -> None:
    db.create_queue("orders").put({"n": 1})
    with TestClient(create_app(db)) as http:
        routes = keyed_routes(http)
        assert len(routes) >= 45  # the API's, the metrics' and the console's
        wrong = []
        for method, template in routes:
            path = filled(template)
            console = path == "/" or path.startswith("/console/")
            for headers in REFUSED_KEYS:
                for body, kind in BODIES:
                    answer = http.request(
                        method,
                        path,
                        content=body,
                        # Invalid parameters and a cross-site origin: told only 401 too.
                        params={"limit": "many", "wait": "-1", "state": "lost"},
                        headers=headers | {"Content-Type": kind, "Sec-Fetch-Site": "cross-site"},
                    )
                    if answer.status_code != 401:
                        wrong.append(f"{method} {template} {headers} {body!r}: "
                                     f"{answer.status_code} {answer.text[:120]}")  # fmt: skip
                    elif console and 'action="/console/login"' not in answer.text:
                        wrong.append(f"{method} {template}: no login form")
                    elif not console and answer.json()["error"] != "Unauthorized":
                        wrong.append(f"{method} {template}: {answer.text[:120]}")
        assert not wrong, "\n".join(wrong)
    assert db.queue("orders").stats()["ready"] == 1  # nothing done


def test_a_key_the_server_does_not_know_is_told_keys_belong_to_one_database(
    db: sluice.Database, tmp_path: object
) -> None:
    with sluice.connect("memory://") as other:
        elsewhere = Keys(other).add("ops", [], admin=True)
    with TestClient(create_app(db)) as http:
        answer = http.get("/api/queues", headers={"Authorization": f"Bearer {elsewhere}"})
        assert answer.status_code == 401
        assert "keys belong to one database" in answer.json()["detail"]
        assert elsewhere not in answer.text
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
        # The console's login says it too, and no more than it.
        login = http.post(
            "/console/login",
            data={"key": elsewhere},
            headers={"Sec-Fetch-Site": "same-origin"},
        )
        assert login.status_code == 401
        assert "Keys belong to one database" in login.text
        assert elsewhere not in login.text


def test_the_openapi_document_declares_bearer_keys(db: sluice.Database) -> None:
    secret = Keys(db).add("ops", [Grant.parse("*:browse")])
    with TestClient(create_app(db)) as http:
        doc = http.get("/openapi.json").json()
        schemes = doc["components"]["securitySchemes"]
        assert schemes[BEARER] == {
            "type": "http",
            "scheme": "bearer",
            "description": schemes[BEARER]["description"],
        }
        operations = [
            (path, method, op) for path, ops in doc["paths"].items() for method, op in ops.items()
        ]
        assert len(operations) >= 35
        assert all(op.get("security") == [{BEARER: []}] for _, _, op in operations)
        # As a generated client sends it: the scheme's header and token.
        scheme = schemes[BEARER]
        sent = {"Authorization": f"{scheme['scheme'].title()} {secret}"}
        assert http.get("/api/queues", headers=sent).status_code == 200


def test_without_keys_the_document_asks_for_none(db: sluice.Database) -> None:
    with TestClient(create_app(db, auth=False)) as http:
        doc = http.get("/openapi.json").json()
        assert "securitySchemes" not in doc.get("components", {})
        assert not any("security" in op for ops in doc["paths"].values() for op in ops.values())
