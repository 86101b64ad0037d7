"""schemathesis over the server's OpenAPI document: every operation, with inputs the
document allows and inputs it does not, answers with a status and a body that the
document declares (problem documents for errors), and never with a 500.

Three runs over an in-process app (a SQLite file; the no-grants runs on memory):

- an admin key: every operation, schemathesis' default checks but one (see CONFIG);
- a key without grants: besides the same checks, nothing succeeds but what any key
  may do (list the queues it sees, which are none; begin and end its own transaction);
- stateful: schemathesis chains operations through the links it infers from the
  document (a queue created, then read, changed, enqueued into, browsed, dropped; a
  transaction begun, then read, committed). Leases and messages are not chained:
  their tokens and ids come inside arrays, which schemathesis does not link through.

The event stream (``GET /api/queues/{name}/events``) stays open while it is
answered, so only the run without grants (403 at once) calls it; its inputs are
tested by hand in test_server_events.py and test_server_bad_input.py.

The number of examples is bounded (the module runs in about a minute), and the run
is deterministic where the Hypothesis profile is (CI's derandomizes).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("schemathesis")

import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis import BaseSchema, Case, CheckContext, Response
from schemathesis.python.asgi import shutdown_lifespans

import sluice
from sluice import ManualClock
from sluice.server.app import create_app
from sluice.server.grants import Grant, Keys

T0 = 1_800_000_000.0
PROBLEM = "application/problem+json"

# Fuzzed names rarely name a queue: these do (Hypothesis tries "0" first).
QUEUES = ("0", "orders")


def _document() -> dict[str, Any]:
    with sluice.connect("memory://") as db:
        return create_app(db).openapi()


CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {
            "max-examples": 8,
            # As the Hypothesis profile: the same examples every run in CI.
            "deterministic": settings().derandomize,
            "database": "none",
        },
        "checks": {
            # A request the document allows may still be refused, rightly, for what it
            # means: a queue name outside the catalog's rule (422), its own error
            # queue (422), an unknown lease token (410).
            "positive_data_acceptance": {"enabled": False},
            # Its probes without the key go to a base URL, never to the in-process app
            # (schemathesis 4.32's send_probe takes the app from the schema, which is
            # loaded from a dict here): test_server_auth.py sends every route of the
            # app a request without a key, and a false one, instead.
            "ignored_auth": {"enabled": False},
            # A body over the server's limit is refused before it is read (413).
            "negative_data_rejection": {
                "expected-statuses": [400, 401, 403, 404, 405, 409, 413, 415, 422]
            },
        },
    }
)
schema = schemathesis.openapi.from_dict(_document(), config=CONFIG)
streams = schema.include(path_regex=r"/events$")
answered = schema.exclude(path_regex=r"/events$")

Test = Callable[..., None]


def each_operation(chosen: BaseSchema) -> Callable[[Test], Test]:
    """A test per operation of ``chosen`` (schemathesis' decorator, typed)."""
    decorate: Callable[[Test], Test] = chosen.parametrize()
    return decorate


# One database per test for all its examples: what one example makes, the next finds.
examples = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@dataclass(frozen=True)
class Served:
    app: FastAPI
    db: sluice.Database
    admin: dict[str, str]
    nobody: dict[str, str]
    """A key with no grant on any queue: ``~`` is in no queue's name."""


def _serve(url: str) -> Served:
    db = sluice.connect(url, clock=ManualClock(T0))
    for name in QUEUES:
        db.create_queue(name)
    keys = Keys(db)
    admin = keys.add("root", [], admin=True)
    nobody = keys.add("nobody", [Grant.parse("~:produce")])
    return Served(create_app(db, max_request=64 * 1024), db, _bearer(admin), _bearer(nobody))


def _close(served: Served) -> None:
    shutdown_lifespans()  # schemathesis started the app: what it leased goes back
    served.db.close()


# A SQLite file: memory:// is the same SQL in memory, and the suite's time is better
# spent on more examples than on a second backend (the behaviour suite covers those).
@pytest.fixture(params=["sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/queues.db"


@pytest.fixture
def served(url: str) -> Iterator[Served]:
    found = _serve(url)
    try:
        yield found
    finally:
        _close(found)


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


# What any key may do, whatever its grants: (method, path template).
ANY_KEY = {
    ("GET", "/api/queues"),
    ("GET", "/api/types"),  # message types belong to no queue (server/content.py)
    ("POST", "/api/transactions"),
    ("GET", "/api/transactions/{ref}"),
    ("POST", "/api/transactions/{ref}/commit"),
    ("POST", "/api/transactions/{ref}/abort"),
}


def nothing_granted(ctx: CheckContext, response: Response, case: Case[Any]) -> bool:
    """A key without grants succeeds only where any key may, and sees no queue; every
    error it gets is a problem document."""
    operation = (case.method.upper(), case.path)
    if response.status_code < 300:
        assert operation in ANY_KEY, f"{operation} succeeded without a grant"
        if operation == ("GET", "/api/queues"):
            assert response.json() == [], "a key without grants sees queues"
    else:
        assert response.headers["content-type"][0].startswith(PROBLEM)
    return True


@each_operation(answered)
@examples
def test_an_admin_gets_what_the_document_says(case: Case[Any], served: Served) -> None:
    case.call_and_validate(app=served.app, headers=served.admin)


# Grants are checked above the storage: one backend is enough.
on_memory = pytest.mark.parametrize("url", ["memory"], indirect=True)


@each_operation(answered)
@examples
@on_memory
def test_a_key_without_grants_gets_nothing(case: Case[Any], served: Served) -> None:
    case.call_and_validate(
        app=served.app, headers=served.nobody, additional_checks=[nothing_granted]
    )


@each_operation(streams)
@examples
@on_memory
def test_a_key_without_grants_gets_no_stream(case: Case[Any], served: Served) -> None:
    case.call_and_validate(
        app=served.app, headers=served.nobody, additional_checks=[nothing_granted]
    )


def test_chained_operations_get_what_the_document_says(url: str, tmp_path: Path) -> None:
    scenarios = itertools.count()

    class Chained(answered.as_state_machine()):  # type: ignore[misc]
        """Each scenario on a database of its own: Hypothesis replays a scenario and
        needs the same answers again."""

        def setup(self) -> None:
            fresh = url.replace("queues.db", f"queues-{next(scenarios)}.db")
            self.served = _serve(fresh)

        def teardown(self) -> None:
            _close(self.served)

        def get_call_kwargs(self, case: Case[Any]) -> dict[str, Any]:
            return {"app": self.served.app, "headers": self.served.admin}

    # Derandomized everywhere, not only in CI: the scenarios' strategies are drawn from
    # answers of the app, and a random run met Hypothesis' FlakyStrategyDefinition and
    # ran for minutes. A few scenarios of a few steps keep the suite's time small.
    Chained.run(settings=settings(max_examples=5, stateful_step_count=6, deadline=None,
                                  derandomize=True, database=None))  # fmt: skip
