"""Every route of the server as tests/reliability/test_security.py checks it: what a key
needs to be let through, and a request that such a key may make, in a world of queues,
a topic, a task type, a profile and an incoming gateway made for them.

The table is complete by construction: the test enumerates the app's routes and fails
on one that is neither here nor in ``PUBLIC``, so a new route cannot go unchecked."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.routing import Mount

import sluice
from sluice.jobs.profiles import Profile
from sluice.server.grants import ACTIONS, Grant, Keys

__all__ = [
    "ADMIN",
    "ANY_KEY",
    "PUBLIC",
    "PUBLIC_MOUNTS",
    "QUEUE",
    "ROUTES",
    "SOME_BROWSE",
    "AnyGrant",
    "Call",
    "Grants",
    "Owner",
    "Route",
    "World",
    "endpoints",
]

QUEUE = "payroll"
"""The queue most routes act on, named so that no page or series says it by chance."""

ALL = ",".join(sorted(ACTIONS))

PUBLIC: dict[tuple[str, str], str] = {
    ("GET", "/openapi.json"): "the API's description: routes and shapes, no data",
    ("HEAD", "/openapi.json"): "the API's description: routes and shapes, no data",
    ("GET", "/docs"): "the page that shows /openapi.json",
    ("HEAD", "/docs"): "the page that shows /openapi.json",
    ("GET", "/docs/oauth2-redirect"): "a static page of the docs' UI",
    ("HEAD", "/docs/oauth2-redirect"): "a static page of the docs' UI",
    ("GET", "/redoc"): "the other page that shows /openapi.json",
    ("HEAD", "/redoc"): "the other page that shows /openapi.json",
    ("GET", "/console/login"): "the console's login form, where a key is given",
    ("POST", "/console/login"): "logging in checks the key it is given",
    ("POST", "/console/logout"): "logging out only drops the cookie",
}
"""Routes that need no key (docs/server.md), each with why."""

# Leases and idle transactions the test makes outlive it: the server's reaper ending one
# while a refused request is checked would show as a change that request made (a lease
# extended by 5 s ran out so under a loaded suite, 2026-12-06).
LONG = 3600.0

PUBLIC_MOUNTS = {"/console/static": "the console's script and style, no data"}


@dataclass(frozen=True, slots=True)
class Grants:
    """Each of these grants (``queue:action``), all of them."""

    grants: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AnyGrant:
    """Any one action on ``queue``."""

    queue: str


@dataclass(frozen=True, slots=True)
class Owner:
    """The key that began the transaction, which has ``grants`` to set it up; to any
    other key the transaction does not exist (404)."""

    grants: tuple[str, ...] = ("elsewhere:browse",)


ADMIN: Literal["admin"] = "admin"
ANY_KEY: Literal["any key"] = "any key"
SOME_BROWSE: Literal["browse on some queue"] = "browse on some queue"

Needs = Grants | AnyGrant | Owner | Literal["admin", "any key", "browse on some queue"]


@dataclass(frozen=True, slots=True)
class Call:
    """A request's path and body (``form``: a console action's, url-encoded)."""

    path: str
    json: Any = None
    params: dict[str, str] | None = None
    form: str | None = None


@dataclass(slots=True)
class World:
    """A database with what every route needs, the app's client, and keys on demand."""

    db: sluice.Database
    http: TestClient
    admin: dict[str, str] = field(default_factory=dict)
    _names: Iterator[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        db = self.db
        db.create_queue(QUEUE, error_queue=f"{QUEUE}.errors")
        db.create_queue("audit")
        db.create_queue("alerts")
        db.create_topic("news")
        db.subscribe("news", "news.mine")
        db.jobs.define("t")  # its tasks wait in tasks.t
        db.jobs.set_profile(Profile("t", default_per_hour=100))
        db.gateways.define("inbox", direction="in", transport="http")
        self.admin = self.key(admin=True)

    def key(self, *grants: str, admin: bool = False) -> dict[str, str]:
        """Headers with a new key's secret."""
        return {"Authorization": f"Bearer {self.secret(*grants, admin=admin)}"}

    def secret(self, *grants: str, admin: bool = False) -> str:
        name = f"k{next(self._names)}"
        return Keys(self.db).add(name, [Grant.parse(g) for g in grants], admin=admin)

    def send(self, method: str, call: Call, headers: dict[str, str]) -> Any:
        if call.form is not None:
            headers = headers | {"Content-Type": "application/x-www-form-urlencoded"}
        body = None if call.form is None else call.form.encode()
        return self.http.request(
            method, call.path, headers=headers, json=call.json, params=call.params, content=body
        )

    def leased(self) -> str:
        """A token of a message of QUEUE the admin leased."""
        self.db.queue(QUEUE).put({"n": 1})
        taken = self.http.post(
            f"/api/queues/{QUEUE}/leases", headers=self.admin, json={"lease": LONG}
        )
        assert taken.status_code == 200, taken.text
        token: str = taken.json()["messages"][0]["token"]
        return token

    def begun(self, who: dict[str, str]) -> str:
        """A transaction ``who`` began."""
        begun = self.http.post("/api/transactions", headers=who, json={"idle": LONG})
        assert begun.status_code == 201, begun.text
        ref: str = begun.json()["id"]
        return ref

    def holding(self, who: dict[str, str]) -> tuple[str, str]:
        """A transaction ``who`` began, and the id of a message of QUEUE it holds."""
        ref = self.begun(who)
        self.db.queue(QUEUE).put({"n": 2})
        taken = self.http.post(f"/api/transactions/{ref}/queues/{QUEUE}/dequeue", headers=who,
                               json={})  # fmt: skip
        assert taken.status_code == 200, taken.text
        message: str = taken.json()[0]["id"]
        return ref, message

    def snapshot(self) -> object:
        """What a refused request must leave as it was."""
        db = self.db
        queues = [
            (s.name, s.kind, s.error_queue, s.max_attempts, s.paused, db.queue(s.name).stats())
            for s in db.queues()
        ]
        properties = [
            (q, [p.name for p in db.backend.queue_properties(q)]) for q in (QUEUE, "audit")
        ]
        jobs = [(j.id, j.status) for j in db.jobs.list()]
        app = self.http.app
        held = (len(app.state.leases), len(app.state.transactions))  # type: ignore[attr-defined]
        rules = sorted(db.rules.application.rules)
        return (
            queues,
            sorted(db.message_types()),
            properties,
            jobs,
            db.jobs.profile("t"),
            rules,
            held,
        )


@dataclass(frozen=True, slots=True)
class Route:
    """What a route needs, a request of it (made for the key that will send it), and the
    status the key that may gets."""

    needs: Needs
    call: Callable[[World, dict[str, str]], Call]
    ok: int = 200


def _fixed(path: str, json: Any = None, **options: Any) -> Callable[[World, dict[str, str]], Call]:
    return lambda w, who: Call(path, json, **options)


def _doomed(w: World, who: dict[str, str]) -> Call:
    w.db.create_queue("doomed", exist_ok=True)
    return Call("/api/queues/doomed")


def _settle(action: str, json: Any = None) -> Callable[[World, dict[str, str]], Call]:
    return lambda w, who: Call(f"/api/leases/{w.leased()}/{action}", json)


def _in_tx(tail: str, json: Any) -> Callable[[World, dict[str, str]], Call]:
    return lambda w, who: Call(f"/api/transactions/{w.begun(who)}/{tail}", json)


def _held(action: str, json: Any = None) -> Callable[[World, dict[str, str]], Call]:
    def call(w: World, who: dict[str, str]) -> Call:
        ref, message = w.holding(who)
        return Call(f"/api/transactions/{ref}/messages/{message}/{action}", json)

    return call


def _gone_subscription(w: World, who: dict[str, str]) -> Call:
    w.db.subscribe("news", "news.gone", exist_ok=True)
    return Call("/api/subscriptions/news.gone")


def _job(w: World, who: dict[str, str]) -> Call:
    return Call(f"/api/jobs/{w.db.jobs.submit('looked-at', [('t', 1)])}")


def _profiled(w: World, who: dict[str, str]) -> Call:
    w.db.jobs.set_profile(Profile("t", default_per_hour=100))
    return Call("/api/profiles/t")


Q = QUEUE
NEWS = "news"
ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/api/queues"): Route(ANY_KEY, _fixed("/api/queues")),
    ("POST", "/api/queues"): Route(
        Grants(("made:manage", "made.dead:manage")),
        _fixed("/api/queues", {"name": "made", "error_queue": "made.dead"}),
        201,
    ),
    ("GET", "/api/queues/{name}"): Route(AnyGrant(Q), _fixed(f"/api/queues/{Q}")),
    ("PATCH", "/api/queues/{name}"): Route(
        Grants((f"{Q}:manage", f"{Q}.dead:manage")),
        _fixed(f"/api/queues/{Q}", {"max_attempts": 3, "error_queue": f"{Q}.dead"}),
    ),
    ("POST", "/api/queues/{name}/pause"): Route(
        Grants((f"{Q}:manage",)), _fixed(f"/api/queues/{Q}/pause")
    ),
    ("POST", "/api/queues/{name}/resume"): Route(
        Grants((f"{Q}:manage",)), _fixed(f"/api/queues/{Q}/resume")
    ),
    ("POST", "/api/queues/{name}/purge"): Route(
        Grants((f"{Q}:manage",)), _fixed(f"/api/queues/{Q}/purge", {"state": "ready"})
    ),
    ("DELETE", "/api/queues/{name}"): Route(Grants(("doomed:manage",)), _doomed, 204),
    ("GET", "/api/types"): Route(ANY_KEY, _fixed("/api/types")),
    ("POST", "/api/types"): Route(
        ADMIN, _fixed("/api/types", {"name": "Invoice", "schema": {"type": "object"}}), 201
    ),
    ("POST", "/api/properties"): Route(
        Grants((f"{Q}:manage", "audit:manage")),
        _fixed(
            "/api/properties",
            {"name": "amount", "expression": "body.n", "queues": [Q, "audit"], "type": "number"},
        ),
        201,
    ),
    ("GET", "/api/queues/{name}/properties"): Route(
        AnyGrant(Q), _fixed(f"/api/queues/{Q}/properties")
    ),
    ("POST", "/api/queues/{name}/messages"): Route(
        Grants((f"{Q}:produce",)),
        _fixed(f"/api/queues/{Q}/messages", {"messages": [{"body": 1}]}),
        201,
    ),
    ("GET", "/api/queues/{name}/messages"): Route(
        Grants((f"{Q}:browse",)), _fixed(f"/api/queues/{Q}/messages")
    ),
    ("POST", "/api/queues/{name}/leases"): Route(
        Grants((f"{Q}:consume",)), _fixed(f"/api/queues/{Q}/leases", {"lease": LONG})
    ),
    ("POST", "/api/leases/{token}/ack"): Route(Grants((f"{Q}:consume",)), _settle("ack"), 204),
    ("POST", "/api/leases/{token}/release"): Route(
        Grants((f"{Q}:consume",)), _settle("release"), 204
    ),
    ("POST", "/api/leases/{token}/reject"): Route(
        Grants((f"{Q}:consume",)), _settle("reject", {"reason": "r"}), 204
    ),
    ("POST", "/api/leases/{token}/extend"): Route(
        Grants((f"{Q}:consume",)), _settle("extend", {"seconds": LONG})
    ),
    # The stream never ends: a selector that does not parse shows the key was let through.
    ("GET", "/api/queues/{name}/events"): Route(
        Grants((f"{Q}:consume",)),
        _fixed(f"/api/queues/{Q}/events", params={"where": "(SELECT 1)"}),
        422,
    ),
    ("POST", "/api/transactions"): Route(ANY_KEY, _fixed("/api/transactions", {"idle": LONG}), 201),
    ("GET", "/api/transactions/{ref}"): Route(
        Owner(), lambda w, who: Call(f"/api/transactions/{w.begun(who)}")
    ),
    ("POST", "/api/transactions/{ref}/queues/{name}/messages"): Route(
        Grants((f"{Q}:produce",)), _in_tx(f"queues/{Q}/messages", {"messages": [{"body": 1}]}), 201
    ),
    ("POST", "/api/transactions/{ref}/queues/{name}/dequeue"): Route(
        Grants((f"{Q}:consume",)), _in_tx(f"queues/{Q}/dequeue", {})
    ),
    ("POST", "/api/transactions/{ref}/messages/{message:path}/release"): Route(
        Owner((f"{Q}:consume",)), _held("release"), 204
    ),
    ("POST", "/api/transactions/{ref}/messages/{message:path}/reject"): Route(
        Owner((f"{Q}:consume",)), _held("reject", {"reason": "r"}), 204
    ),
    ("POST", "/api/transactions/{ref}/commit"): Route(Owner(), _in_tx("commit", None), 204),
    ("POST", "/api/transactions/{ref}/abort"): Route(Owner(), _in_tx("abort", None), 204),
    ("POST", "/api/topics"): Route(
        Grants(("bulletins:manage",)), _fixed("/api/topics", {"name": "bulletins"}), 201
    ),
    ("GET", "/api/topics/{topic}/subscriptions"): Route(
        Grants((f"{NEWS}:browse",)), _fixed(f"/api/topics/{NEWS}/subscriptions")
    ),
    ("POST", "/api/topics/{topic}/subscriptions"): Route(
        Grants((f"{NEWS}:consume", "news.yours:manage", "news.yours.dead:manage")),
        _fixed(
            f"/api/topics/{NEWS}/subscriptions",
            {"name": "news.yours", "error_queue": "news.yours.dead"},
        ),
        201,
    ),
    ("DELETE", "/api/subscriptions/{name}"): Route(
        Grants(("news.gone:manage",)), _gone_subscription, 204
    ),
    ("POST", "/api/jobs"): Route(
        Grants(("tasks.t:produce", "alerts:produce")),
        _fixed(
            "/api/jobs", {"name": "j", "tasks": [{"type": "t", "body": 1}], "alert_queue": "alerts"}
        ),
        201,
    ),
    ("GET", "/api/jobs"): Route(ADMIN, _fixed("/api/jobs")),
    ("GET", "/api/jobs/{job:path}"): Route(ADMIN, _job),
    ("GET", "/api/profiles"): Route(ADMIN, _fixed("/api/profiles")),
    ("GET", "/api/profiles/{task_type}"): Route(ADMIN, _profiled),
    ("PUT", "/api/profiles/{task_type}"): Route(
        ADMIN, _fixed("/api/profiles/t", {"default_per_hour": 50})
    ),
    ("DELETE", "/api/profiles/{task_type}"): Route(ADMIN, _profiled, 204),
    ("GET", "/api/rules"): Route(ADMIN, _fixed("/api/rules")),
    ("POST", "/api/rules"): Route(ADMIN, _fixed("/api/rules", {"text": "CREATE QUEUE ruled;"})),
    ("POST", "/api/gateways/{name}"): Route(
        Grants(("inbox:produce",)), _fixed("/api/gateways/inbox", 1), 201
    ),
    ("POST", "/api/gateways/{name}/batch"): Route(
        Grants(("inbox:produce",)),
        _fixed("/api/gateways/inbox/batch", {"messages": [{"key": "k-1", "body": "MQ=="}]}),
    ),
    ("GET", "/metrics"): Route(SOME_BROWSE, _fixed("/metrics")),
    ("GET", "/"): Route(ANY_KEY, _fixed("/")),
    ("GET", "/console/overview"): Route(ANY_KEY, _fixed("/console/overview")),
    ("GET", "/console/queues/{name}"): Route(
        Grants((f"{Q}:browse",)), _fixed(f"/console/queues/{Q}")
    ),
    ("GET", "/console/queues/{name}/live"): Route(
        Grants((f"{Q}:browse",)), _fixed(f"/console/queues/{Q}/live")
    ),
    ("GET", "/console/queues/{name}/messages"): Route(
        Grants((f"{Q}:browse",)), _fixed(f"/console/queues/{Q}/messages")
    ),
    **{
        ("POST", f"/console/queues/{{name}}/{action}"): Route(
            Grants((f"{Q}:{grant}",)), _fixed(f"/console/queues/{Q}/{action}", form=form)
        )
        for action, grant, form in (
            ("pause", "manage", ""),
            ("resume", "manage", ""),
            ("retry", "consume", "all=yes"),
            ("discard", "consume", "all=yes"),
        )
    },
}


def endpoints(app: FastAPI) -> tuple[set[tuple[str, str]], set[str]]:
    """Every (method, path template) the app routes, and the paths of its mounts."""
    found: set[tuple[str, str]] = set()
    mounts: set[str] = set()

    def walk(routes: list[Any]) -> None:
        for route in routes:
            if isinstance(route, Mount):
                mounts.add(route.path)
                continue
            nested = getattr(route, "effective_candidates", None)  # an included router
            if nested is not None:
                walk(nested())
                continue
            methods = getattr(route, "methods", None)
            if not methods:
                raise AssertionError(f"a route of a kind this test does not know: {route!r}")
            found.update((method, route.path) for method in methods)

    walk(list(app.routes))
    return found, mounts
