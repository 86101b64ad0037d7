"""The web console's routes on every backend, in process (Starlette's TestClient): a key
on every route (401 without, 403 without the grant), the login cookie, refusal of
cross-site changes, retry and discard of failed messages, paging and selectors."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator

import pytest

import sluice

pytest.importorskip("fastapi")
pytest.importorskip("jinja2")

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from sluice.jobs.profiles import Profile
from sluice.server.app import create_app
from sluice.server.console import routes
from sluice.server.console.access import COOKIE
from sluice.server.grants import Grant, Keys

SAME = {"Sec-Fetch-Site": "same-origin"}
"""What a browser sends with a request from one of the console's own pages."""

# Every console route but the login and logout forms, with a queue of the test's.
ROUTES = [
    (method.lower(), route.path.replace("{name}", "orders.errors"))
    for route in routes.router.routes
    if isinstance(route, APIRoute) and route.path not in ("/console/login", "/console/logout")
    for method in sorted(route.methods or ())
]


def secret(db: sluice.Database, name: str, *grants: str, admin: bool = False) -> str:
    return Keys(db).add(name, [Grant.parse(g) for g in grants], admin=admin)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def client(db: sluice.Database) -> Iterator[TestClient]:
    # Sampling as often as the charts' tests look, however long a sample takes.
    with TestClient(create_app(db, sample_every=0.05, sample_duty=1.0)) as client:
        yield client


@pytest.fixture
def failed(db: sluice.Database) -> sluice.Queue:
    """orders.errors holding five rejected orders, n = 0..4."""
    db.create_queue("orders", error_queue="orders.errors")
    orders = db.queue("orders")
    orders.put_many([{"n": n} for n in range(5)])
    for n in range(5):
        m = orders.get()
        assert m is not None
        m.reject(f"bad {n}")
    return db.queue("orders.errors")


def logged_in(client: TestClient, key: str) -> None:
    r = client.post("/console/login", data={"key": key, "next": "/"}, headers=SAME,
                    follow_redirects=False)  # fmt: skip
    assert r.status_code == 303, r.text


def wait_for(
    client: TestClient, path: str, text: str, headers: dict[str, str] | None = None
) -> str:
    """The page once it shows ``text`` (the sampler runs on its own thread)."""
    deadline = time.monotonic() + 10
    while True:
        page = client.get(path, headers=headers).text
        if text in page or time.monotonic() > deadline:
            assert text in page
            return page
        time.sleep(0.02)


def positions(html: str) -> list[str]:
    return re.findall(r'<tr data-position="([^"]+)"', html)


def test_the_routes_under_test_are_all_of_the_console() -> None:
    assert len(ROUTES) >= 7
    assert ("get", "/") in ROUTES
    assert ("post", "/console/queues/orders.errors/retry") in ROUTES


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_console_route_asks_for_a_key(
    client: TestClient, db: sluice.Database, failed: sluice.Queue, method: str, path: str
) -> None:
    data = {"all": "yes"} if method == "post" else None
    for headers in ({}, bearer("sk_not-a-key"), {"Cookie": f"{COOKIE}=sk_not-a-key"}):
        r = client.request(method, path, headers=SAME | headers, data=data)
        assert r.status_code == 401, r.text
        assert 'action="/console/login"' in r.text  # the login form, in the page
    assert failed.stats()["ready"] == 5  # nothing done


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if "/queues/" in r[1]])
def test_a_key_without_the_grant_is_forbidden(
    client: TestClient, db: sluice.Database, failed: sluice.Queue, method: str, path: str
) -> None:
    other = secret(db, "other", "invoices*:produce,consume,browse,manage")
    data = {"all": "yes"} if method == "post" else None
    r = client.request(method, path, headers=SAME | bearer(other), data=data)
    assert r.status_code == 403, r.text
    assert "no grant" in r.text
    assert failed.stats()["ready"] == 5


def test_a_fragment_asked_without_a_key_sends_the_page_to_the_login(
    client: TestClient, failed: sluice.Queue
) -> None:
    asked = {"HX-Request": "true", "HX-Current-URL": "http://testserver/x?y=1"}
    r = client.get("/console/overview", headers=asked)
    assert r.status_code == 401
    assert r.headers["HX-Redirect"] == "/console/login?next=%2Fx%3Fy%3D1"


def test_logging_in_sets_a_strict_cookie_that_revocation_ends(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    key = secret(db, "ops", "orders*:browse")
    r = client.post("/console/login", data={"key": key, "next": "https://evil.example/x?a=1"},
                    headers=SAME, follow_redirects=False)  # fmt: skip
    assert r.status_code == 303
    assert r.headers["location"] == "/x?a=1"  # only a path of this server
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    page = client.get("/")
    assert page.status_code == 200
    assert 'data-queue="orders.errors"' in page.text
    Keys(db).revoke("ops")
    assert client.get("/").status_code == 401
    wrong = client.post("/console/login", data={"key": key}, headers=SAME)
    assert wrong.status_code == 401
    assert "unknown or revoked" in wrong.text


def test_logging_out_forgets_the_key(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    logged_in(client, secret(db, "ops", "orders*:browse"))
    assert client.get("/").status_code == 200
    client.post("/console/logout", headers=SAME)
    assert client.get("/").status_code == 401


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {},  # a cookie, and nothing to say where the request comes from
    ],
)
def test_a_cross_site_change_is_refused(
    client: TestClient, db: sluice.Database, failed: sluice.Queue, headers: dict[str, str]
) -> None:
    logged_in(client, secret(db, "ops", "orders*:consume,produce,browse"))
    for action in ("retry", "discard"):
        r = client.post(f"/console/queues/orders.errors/{action}", data={"all": "yes"},
                        headers=headers)  # fmt: skip
        assert r.status_code == 403, r.text
        assert "refused" in r.text
    assert failed.stats()["ready"] == 5
    login = client.post("/console/login", data={"key": "x"}, headers=headers)
    assert login.status_code == 403


def test_a_same_origin_change_is_taken(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    key = secret(db, "ops", "orders*:consume,produce,browse")
    logged_in(client, key)
    origin = {"Origin": "http://testserver"}  # a browser without Sec-Fetch-Site
    first = failed.browse(1)[0].position
    r = client.post(
        "/console/queues/orders.errors/discard", data={"at": str(first)}, headers=origin
    )
    assert r.status_code == 200, r.text
    # A program with its key in the header is no browser acting with a cookie.
    client.cookies.clear()
    r = client.post("/console/queues/orders.errors/discard", data={"all": "yes"},
                    headers=bearer(key))  # fmt: skip
    assert r.status_code == 200, r.text
    assert failed.stats()["ready"] == 0


def test_retry_and_discard_one_message(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    logged_in(client, secret(db, "ops", "orders*:consume,produce,browse"))
    page = client.get("/console/queues/orders.errors")
    assert page.status_code == 200
    shown = positions(page.text)
    assert len(shown) == 5
    assert "bad 0" in page.text
    assert "from orders" in page.text
    r = client.post("/console/queues/orders.errors/retry", data={"at": shown[0]}, headers=SAME)
    assert "Retried 1 message back to orders." in r.text
    assert positions(r.text) == shown[1:]
    r = client.post("/console/queues/orders.errors/discard", data={"at": shown[1]}, headers=SAME)
    assert "Discarded 1 message." in r.text
    assert [m.body for m in db.queue("orders").browse()] == [{"n": 0}]
    assert failed.stats()["ready"] == 3


def test_retry_and_discard_all_a_selector_matches(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    logged_in(client, secret(db, "ops", "orders*:consume,produce,browse"))
    r = client.post("/console/queues/orders.errors/retry",
                    data={"all": "yes", "where": "body.n >= 3", "state": "ready"},
                    headers=SAME)  # fmt: skip
    assert "Retried 2 messages back to orders." in r.text
    assert len(positions(r.text)) == 0  # the list still shows what the selector matches
    r = client.post("/console/queues/orders.errors/discard", data={"all": "yes", "where": ""},
                    headers=SAME)  # fmt: skip
    assert "Discarded 3 messages." in r.text
    assert sorted(m.body["n"] for m in db.queue("orders").browse()) == [3, 4]
    assert failed.stats()["ready"] == 0
    vague = client.post("/console/queues/orders.errors/retry", data={}, headers=SAME)
    assert vague.status_code == 422
    assert "say which" in vague.text


def test_retry_leaves_the_sources_the_key_may_not_produce_into(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    logged_in(client, secret(db, "ops", "orders.errors:consume,browse"))
    r = client.post("/console/queues/orders.errors/retry", data={"all": "yes"}, headers=SAME)
    assert "Retried 0 messages; left 5 messages of orders (no produce grant)." in r.text
    assert failed.stats()["ready"] == 5
    # Browsing alone shows no buttons, and acting needs consume.
    viewer = secret(db, "viewer", "orders*:browse")
    page = client.get("/console/queues/orders.errors", headers=bearer(viewer))
    assert "Retry" not in page.text
    r = client.post("/console/queues/orders.errors/discard", data={"all": "yes"},
                    headers=bearer(viewer))  # fmt: skip
    assert r.status_code == 403


def test_paging_through_the_messages(client: TestClient, db: sluice.Database) -> None:
    db.create_queue("big").put_many([{"n": n} for n in range(routes.PAGE * 2 + 3)])
    logged_in(client, secret(db, "ops", "big:browse"))
    seen: list[str] = []
    path = "/console/queues/big?where=body.n+%3E%3D+0"
    while path:
        page = client.get(path.replace("&amp;", "&"))
        assert page.status_code == 200
        seen += positions(page.text)
        found = re.search(r'href="([^"]+)" rel="next"', page.text)
        path = found[1] if found else ""
    assert len(seen) == routes.PAGE * 2 + 3
    assert len(set(seen)) == len(seen)


def test_a_bad_selector_is_said_in_the_page(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    logged_in(client, secret(db, "ops", "orders*:consume,produce,browse"))
    for path in ("/console/queues/orders.errors", "/console/queues/orders.errors/messages"):
        r = client.get(path, params={"where": "body.n >"})
        assert r.status_code == 200
        assert "The selector is not valid" in r.text
    r = client.post("/console/queues/orders.errors/retry",
                    data={"all": "yes", "where": "nonsense("}, headers=SAME)  # fmt: skip
    assert r.status_code == 200
    assert "The selector is not valid" in r.text
    assert failed.stats()["ready"] == 5
    bad_state = client.get("/console/queues/orders.errors", params={"state": "lost"})
    assert bad_state.status_code == 422
    assert "state must be one of" in bad_state.text
    missing = client.get("/console/queues/nowhere", headers=bearer(secret(db, "a", "*:browse")))
    assert missing.status_code == 404
    assert "does not exist" in missing.text
    assert "db.create_queue" not in missing.text  # the Python API's hint, not a person's


def test_values_are_escaped(client: TestClient, db: sluice.Database) -> None:
    q = db.create_queue("x", error_queue="x.errors")
    q.put({"html": "<img src=x onerror=alert(1)>"})
    m = q.get()
    assert m is not None
    m.reject("<b>bold</b>")
    logged_in(client, secret(db, "root", admin=True))
    for path in ("/", "/console/queues/x.errors"):
        text = client.get(path).text
        assert "<script>" not in text.replace('<script src="/console/static/htmx.min.js">', "")
        assert "<img" not in text
        assert "<b>bold" not in text


def test_the_dashboard_shows_what_the_key_may_see(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    db.create_queue("invoices")
    db.create_topic("news")
    db.subscribe("news", "news.eu", where="body.region = 'EU'")
    db.queue("news").put({"region": "EU"})
    ops = secret(db, "ops", "orders*:browse", "news*:browse")
    page = client.get("/", headers=bearer(ops)).text
    assert 'data-queue="orders"' in page
    assert 'data-queue="invoices"' not in page
    assert "news.eu" in page  # a subscription, with its lag
    assert "Open jobs" not in page  # jobs and profiles are an admin's
    root = secret(db, "root", admin=True)

    db.jobs.define("work")
    db.jobs.set_profile(Profile("work", default_per_hour=500))
    db.jobs.submit("nightly", [("work", 1)], deadline=db.clock.now() - 1)
    page = client.get("/console/overview", headers=bearer(root)).text
    assert 'data-queue="invoices"' in page
    assert "Open jobs" in page
    assert "nightly" in page
    assert "<progress" in page
    assert "(late)" in page
    assert "0 of 500" in page  # starts this hour against the profile's limit
    assert wait_for(client, "/console/queues/tasks.work/live", "profile limit 500", bearer(root))


def test_without_keys_there_is_no_login(db: sluice.Database, failed: sluice.Queue) -> None:
    with TestClient(create_app(db, auth=False)) as client:
        assert client.get("/").status_code == 200
        r = client.get("/console/login", follow_redirects=False)
        assert r.status_code == 303
        r = client.post("/console/queues/orders.errors/retry", data={"all": "yes"}, headers=SAME)
        assert "Retried 5 messages back to orders." in r.text
        assert client.post("/console/queues/orders.errors/discard", data={"all": "yes"},
                           headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403  # fmt: skip


def test_the_charts_follow_the_depth(client: TestClient, db: sluice.Database) -> None:
    q = db.create_queue("orders")
    logged_in(client, secret(db, "ops", "orders:browse"))
    q.put_many(list(range(7)))
    live = wait_for(client, "/console/queues/orders/live", 'data-latest="7"')
    assert "<polyline" in live


def test_pause_and_resume_a_queue(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    orders = db.queue("orders")
    orders.put("x")
    viewer = secret(db, "viewer", "orders*:browse,consume")
    r = client.post("/console/queues/orders/pause", headers=SAME | bearer(viewer))
    assert r.status_code == 403  # pausing is managing
    logged_in(client, secret(db, "ops", "orders*:browse,manage"))
    r = client.post("/console/queues/orders/pause", headers=SAME)
    assert r.status_code == 200
    assert "paused" in r.text
    assert "Resume" in r.text
    assert orders.paused
    assert db.queue("orders").get() is None  # consumers get nothing while it is paused
    page = client.get("/").text
    assert re.search(r'data-queue="orders">.*?badge paused', page, re.S)
    r = client.post("/console/queues/orders/resume", data={"from": "overview"}, headers=SAME)
    assert 'data-queue="orders"' in r.text  # the dashboard's part, redrawn
    assert not orders.paused
    m = db.queue("orders").get()
    assert m is not None
    m.ack()


def cells(html: str, queue: str) -> dict[str, str]:
    """The overview's counts of ``queue``'s row, by column (data-count), as text."""
    row = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert row is not None, f"no row of {queue}"
    found = re.findall(r'<td class="num" data-count="(\w+)"[^>]*>(.*?)</td>', row[1], re.S)
    return {name: re.sub(r"<[^>]+>|\s+", "", text) for name, text in found}


def test_a_subscription_s_waiting_messages_count_as_everywhere_else(
    client: TestClient, db: sluice.Database, clock: sluice.ManualClock
) -> None:
    # The overview said Ready 0 and Oldest 0 s, the chart depth 0, while stats() and
    # /metrics counted the message still in the topic.
    db.create_topic("news")
    db.subscribe("news", "news.eu")
    db.queue("news").put({"region": "EU"})
    clock.advance(30)
    root = bearer(secret(db, "root", admin=True))
    assert db.queue("news.eu").stats()["ready"] == 1
    row = cells(client.get("/", headers=root).text, "news.eu")
    assert (row["ready"], row["oldest"]) == ("1", "30s")
    assert 'data-count="ready">ready <b>1</b>' in client.get(
        "/console/queues/news.eu", headers=root
    ).text.replace("\n", "")
    wait_for(client, "/console/queues/news.eu/live", 'data-latest="1"', root)
    metrics = client.get("/metrics", headers=root).text
    assert 'sluice_queue_messages{queue="news.eu",state="ready"} 1.0' in metrics
    assert 'sluice_queue_oldest_ready_age_seconds{queue="news.eu"} 30.0' in metrics


def test_the_failed_column_counts_what_waits_in_the_error_queue(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    kept = db.create_queue("kept")  # no error queue: a reject stays here, failed
    kept.put(1)
    m = kept.get()
    assert m is not None
    m.reject("no")
    page = client.get("/", headers=bearer(secret(db, "ops", "orders*:browse", "kept:browse")))
    assert cells(page.text, "orders")["failed"] == "5"
    assert '<a class="bad" href="/console/queues/orders.errors">5</a>' in page.text
    assert cells(page.text, "kept")["failed"] == "1"
    assert '<a class="bad" href="/console/queues/kept?state=failed">1</a>' in page.text
    # A key that may not browse the error queue is shown only what the queue keeps.
    page = client.get("/", headers=bearer(secret(db, "orders-only", "orders:browse")))
    assert cells(page.text, "orders")["failed"] == "0"


def test_a_task_s_deadlines_are_shown_as_times(
    client: TestClient, db: sluice.Database, clock: sluice.ManualClock
) -> None:
    # A task without a deadline showed deadline 1000000000000000.0 (what it is stored as).
    db.jobs.define("work")
    db.jobs.submit("nightly", [("work", {"n": 1})])
    db.jobs.submit("urgent", [("work", {"n": 2})], deadline=clock.now() + 3600)
    page = client.get("/console/queues/tasks.work", headers=bearer(secret(db, "r", admin=True)))
    assert "1000000000000000" not in page.text
    assert "1e+15" not in page.text
    assert "deadline=none" in page.text
    due = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(clock.now() + 3600))
    assert f"job_deadline={due}" in page.text


def test_the_selector_the_browser_shows_as_an_example_runs(
    client: TestClient, db: sluice.Database
) -> None:
    # Its placeholder was "... properties.region = 'EU'", which the language refuses.
    orders = db.create_queue("orders")
    orders.put({"total": 120}, properties={"region": "EU"})
    orders.put({"total": 120}, properties={"region": "US"})
    ops = bearer(secret(db, "ops", "orders:browse"))
    page = client.get("/console/queues/orders", headers=ops).text
    example = re.search(r'name="where" value="" placeholder="([^"]+)"', page)
    assert example is not None
    assert html.unescape(example[1]) == routes.EXAMPLE
    found = client.get("/console/queues/orders", params={"where": routes.EXAMPLE}, headers=ops)
    assert "not valid" not in found.text
    assert len(positions(found.text)) == 1


@pytest.mark.parametrize("view", routes.VIEWS)
def test_the_navigation_reaches_each_part_of_the_dashboard(
    client: TestClient, db: sluice.Database, failed: sluice.Queue, view: str
) -> None:
    db.create_topic("news")
    db.subscribe("news", "news.eu")
    db.apply(
        "CREATE QUEUE inbox; CREATE QUEUE copies; "
        "CREATE RULE copy FOR inbox IF true THEN ENQUEUE body INTO copies;"
    )
    root = bearer(secret(db, "root", admin=True))
    dashboard = client.get("/", headers=root).text
    assert f'href="/?view={view}"' in dashboard  # in the navigation of every page
    page = client.get("/", params={"view": view}, headers=root)
    assert page.status_code == 200
    assert re.findall(r'<section id="(\w+)"', page.text) == [view]
    assert f'hx-get="/console/overview?view={view}"' in page.text  # it refreshes itself
    shown = {
        "queues": 'data-queue="orders"',
        "subscriptions": 'data-subscription="news.eu"',
        "jobs": "No open jobs.",
        "errors": 'data-errors="orders.errors"',
        "rules": 'data-rule="copy"',
    }
    assert shown[view] in page.text
    part = client.get("/console/overview", params={"view": view}, headers=root).text
    assert shown[view] in part


def test_a_view_an_ordinary_key_may_not_see_says_so(
    client: TestClient, db: sluice.Database, failed: sluice.Queue
) -> None:
    ops = bearer(secret(db, "ops", "orders*:browse"))
    assert "only an admin key sees them" in client.get("/?view=jobs", headers=ops).text
    assert "only an admin key sees them" in client.get("/?view=rules", headers=ops).text
    errors = client.get("/?view=errors", headers=ops).text
    assert 'data-errors="orders.errors"' in errors
    assert "orders" in errors
    wrong = client.get("/?view=everything", headers=ops)
    assert wrong.status_code == 422
    assert "view must be one of" in wrong.text


def test_the_login_form_shows_an_error_only_for_a_key_refused(
    client: TestClient, db: sluice.Database
) -> None:
    # A browser that had not logged in yet was met by a red box: "log in with an API key".
    for first in (client.get("/"), client.get("/console/login")):
        assert 'action="/console/login"' in first.text
        assert 'class="error"' not in first.text
    client.cookies.set(COOKIE, "sk_revoked-or-never-was")
    again = client.get("/")
    assert again.status_code == 401
    assert 'class="error"' in again.text
    assert "unknown or revoked" in again.text
