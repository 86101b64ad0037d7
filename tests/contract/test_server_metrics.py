"""``GET /metrics`` (sluice.server.metrics) on every backend: who may scrape and what each
key sees, the database's gauges after real traffic, the HTTP histograms, jobs' progress
and profiles' starts; and workers in several processes summed through
PROMETHEUS_MULTIPROC_DIR."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice
from sluice import ManualClock

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from starlette.requests import Request

from sluice.jobs.profiles import Profile
from sluice.server import metrics
from sluice.server.app import create_app
from sluice.server.grants import Grant, Keys

T0 = 1_800_000_000.0

Labels = frozenset[tuple[str, str]]


def key(db: sluice.Database, name: str, *grants: str, admin: bool = False) -> dict[str, str]:
    secret = Keys(db).add(name, [Grant.parse(g) for g in grants], admin=admin)
    return {"Authorization": f"Bearer {secret}"}


def scrape(client: TestClient, headers: dict[str, str]) -> dict[str, dict[Labels, float]]:
    """The samples of a scrape: by sample name, then by label set."""
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    found: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = frozenset(sample.labels.items())
            found.setdefault(sample.name, {})[labels] = sample.value
    return found


def at(series: dict[Labels, float], **labels: str) -> float:
    return series[frozenset(labels.items())]


@pytest.fixture
def client(db: sluice.Database, clock: ManualClock) -> Iterator[TestClient]:
    with TestClient(create_app(db)) as client:
        yield client


@pytest.fixture
def admin(db: sluice.Database) -> dict[str, str]:
    return key(db, "root", admin=True)


def test_metrics_need_a_key_that_may_browse(db: sluice.Database, client: TestClient) -> None:
    assert client.get("/metrics").status_code == 401
    bad = {"Authorization": "Bearer sk_not-a-key"}
    assert client.get("/metrics", headers=bad).status_code == 401
    producer = key(db, "producer", "orders:produce,consume,manage")
    refused = client.get("/metrics", headers=producer)
    assert refused.status_code == 403
    assert refused.json()["error"] == "Forbidden"


def test_depth_by_state_age_and_error_queue(
    db: sluice.Database, client: TestClient, clock: ManualClock, admin: dict[str, str]
) -> None:
    db.create_queue("orders.failed")
    db.create_queue("orders", error_queue="orders.failed")
    put = {"messages": [{"body": n} for n in range(3)] + [{"body": "later", "delay": 600}]}
    assert client.post("/api/queues/orders/messages", json=put, headers=admin).status_code == 201
    clock.advance(30)
    # Leased for longer than the clock moves below: the reaper must not give it back.
    ask = {"limit": 2, "lease": 3600}
    taken = client.post("/api/queues/orders/leases", json=ask, headers=admin).json()
    token = taken["messages"][0]["token"]
    why = {"reason": "bad address"}
    assert client.post(f"/api/leases/{token}/reject", json=why, headers=admin).status_code == 204
    clock.advance(15)

    got = scrape(client, admin)

    depth = got["sluice_queue_messages"]
    assert at(depth, queue="orders", state="ready") == 1
    assert at(depth, queue="orders", state="claimed") == 1
    assert at(depth, queue="orders", state="delayed") == 1
    assert at(depth, queue="orders", state="failed") == 0
    assert at(depth, queue="orders.failed", state="ready") == 1
    assert at(got["sluice_queue_oldest_ready_age_seconds"], queue="orders") == 45
    # A rejected message keeps its times: in the error queue it is as old as it was.
    assert at(got["sluice_queue_oldest_ready_age_seconds"], queue="orders.failed") == 45
    assert at(got["sluice_queue_error_messages"], queue="orders", error_queue="orders.failed") == 1
    info = got["sluice_queue_info"]
    assert at(info, queue="orders", kind="queue", error_queue="orders.failed") == 1
    assert at(info, queue="orders.failed", kind="queue", error_queue="") == 1

    # The delayed message becomes ready: the age runs from then, not from its enqueue.
    clock.advance(600)
    got = scrape(client, admin)
    assert at(got["sluice_queue_messages"], queue="orders", state="ready") == 2
    assert at(got["sluice_queue_oldest_ready_age_seconds"], queue="orders") == 645


def test_a_paused_queue_s_gauge(
    db: sluice.Database, client: TestClient, admin: dict[str, str]
) -> None:
    db.create_queue("orders")
    db.create_queue("invoices")
    assert client.post("/api/queues/orders/pause", headers=admin).status_code == 200
    paused = scrape(client, admin)["sluice_queue_paused"]
    assert (at(paused, queue="orders"), at(paused, queue="invoices")) == (1, 0)
    assert client.post("/api/queues/orders/resume", headers=admin).status_code == 200
    assert at(scrape(client, admin)["sluice_queue_paused"], queue="orders") == 0


def test_a_subscription_counts_its_topic_backlog_as_ready_or_delayed(
    db: sluice.Database, client: TestClient, clock: ManualClock, admin: dict[str, str]
) -> None:
    db.create_topic("events")
    db.subscribe("events", "audit")
    with db.transaction() as tx:
        tx.enqueue("events", {"n": 1})
        tx.enqueue("events", {"n": 2})
        tx.enqueue("events", {"n": 3}, delay=3600)  # not due: delayed, as stats() says
    clock.advance(20)

    got = scrape(client, admin)

    assert at(got["sluice_queue_messages"], queue="audit", state="ready") == 2
    assert at(got["sluice_queue_messages"], queue="audit", state="delayed") == 1
    assert db.queue("audit").stats()["delayed"] == 1
    assert at(got["sluice_queue_info"], queue="audit", kind="subscription", error_queue="") == 1
    assert at(got["sluice_subscription_lag_messages"], subscription="audit", topic="events") == 3
    assert at(got["sluice_subscription_lag_seconds"], subscription="audit", topic="events") == 20


def test_a_browse_key_sees_its_queues_series_only(
    db: sluice.Database, client: TestClient, admin: dict[str, str]
) -> None:
    db.create_queue("orders")
    db.create_queue("payroll")
    db.queue("payroll").put({"salary": 1})
    metrics.count(_request(client), "orders", "enqueued", 2)
    metrics.count(_request(client), "payroll", "enqueued", 1)
    browser = key(db, "viewer", "orders*:browse")

    got = scrape(client, browser)

    queues = {dict(labels)["queue"] for labels in got["sluice_queue_messages"]}
    assert queues == {"orders"}
    assert at(got["sluice_queue_oldest_ready_age_seconds"], queue="orders") == 0  # empty
    assert at(got["sluice_messages_total"], queue="orders", outcome="enqueued") == 2
    assert len(got["sluice_messages_total"]) == 1
    # Series of no queue are the admin's: HTTP, jobs, profiles.
    assert "sluice_http_request_duration_seconds_count" not in got
    assert "sluice_http_requests_in_flight" not in got
    everything = scrape(client, admin)
    assert at(everything["sluice_queue_messages"], queue="payroll", state="ready") == 1
    assert at(everything["sluice_messages_total"], queue="payroll", outcome="enqueued") == 1


def test_requests_are_timed_by_route_template_and_status(
    db: sluice.Database, client: TestClient, admin: dict[str, str]
) -> None:
    db.create_queue("orders")
    for _ in range(3):
        assert client.get("/api/queues/orders", headers=admin).status_code == 200
    assert client.get("/api/queues/nowhere", headers=admin).status_code == 404
    assert client.get("/no/such/route", headers=admin).status_code == 404
    assert client.delete("/metrics", headers=admin).status_code == 405

    got = scrape(client, admin)

    counts = got["sluice_http_request_duration_seconds_count"]
    assert at(counts, method="GET", route="/api/queues/{name}", status="200") == 3
    assert at(counts, method="GET", route="/api/queues/{name}", status="404") == 1
    assert at(counts, method="GET", route="unmatched", status="404") == 1
    assert at(counts, method="DELETE", route="/metrics", status="405") == 1
    infinite = got["sluice_http_request_duration_seconds_bucket"]
    assert at(infinite, method="GET", route="/api/queues/{name}", status="200", le="+Inf") == 3
    # The scrape is in flight while it answers; nothing else is.
    assert at(got["sluice_http_requests_in_flight"], method="GET") == 1


def test_open_jobs_progress(db: sluice.Database, client: TestClient, admin: dict[str, str]) -> None:
    @db.task("resize")
    def resize(body: object) -> None:
        pass

    job = db.jobs.submit("thumbnails", [("resize", {"n": n}) for n in range(4)])
    assert db.worker().run_until_idle(max_tasks=3) == 3

    got = scrape(client, admin)

    tasks = got["sluice_job_tasks"]
    assert at(tasks, job=job, name="thumbnails", state="succeeded") == 3
    assert at(tasks, job=job, name="thumbnails", state="failed") == 0
    assert at(tasks, job=job, name="thumbnails", state="unfinished") == 1
    assert at(got["sluice_job_progress_ratio"], job=job, name="thumbnails") == 0.75

    db.worker().run_until_idle()
    ended = scrape(client, admin)
    assert "sluice_job_tasks" not in ended  # only open jobs have series


def test_a_profile_limit_against_its_starts(
    db: sluice.Database, client: TestClient, admin: dict[str, str]
) -> None:
    @db.task("send_email")
    def send(body: object) -> None:
        pass

    db.jobs.set_profile(Profile("send_email", default_per_hour=5, default_per_cycle=4))
    db.jobs.submit("burst", [("send_email", {"n": n}) for n in range(7)])
    assert db.worker().run_until_idle() == 4  # the cycle's cap

    got = scrape(client, admin)

    assert at(got["sluice_profile_limit"], task_type="send_email", window="hour") == 5
    assert at(got["sluice_profile_limit"], task_type="send_email", window="cycle") == 4
    assert at(got["sluice_profile_starts"], task_type="send_email", window="hour") == 4
    assert at(got["sluice_profile_starts"], task_type="send_email", window="cycle") == 4


def test_count_refuses_an_unknown_outcome(client: TestClient) -> None:
    with pytest.raises(ValueError, match="unknown outcome 'deleted'"):
        metrics.count(_request(client), "orders", "deleted")


def _request(client: TestClient) -> Request:
    """A request of the client's app, as a route has it."""
    return Request({"type": "http", "app": client.app, "headers": []})


WORKER = """
import sys
from fastapi.testclient import TestClient
import sluice
from sluice.server.app import create_app

db = sluice.connect(sys.argv[1])
with TestClient(create_app(db, auth=False)) as client:
    for _ in range(int(sys.argv[2])):
        assert client.get("/api/queues/orders").status_code == 200
    if sys.argv[3] == "scrape":
        print(client.get("/metrics").text)
db.close()
"""


def test_workers_in_several_processes_are_summed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'queues.db'}"
    with sluice.connect(url) as db:
        db.create_queue("orders")
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = os.environ | {"PROMETHEUS_MULTIPROC_DIR": str(shared)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*sys.path, env.get("PYTHONPATH", "")) if p)

    def worker(requests: int, then: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", WORKER, url, str(requests), then],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    worker(2, "-")
    worker(3, "-")
    text = worker(1, "scrape")

    counts = {
        frozenset(s.labels.items()): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "sluice_http_request_duration_seconds_count"
    }
    route = {"method": "GET", "route": "/api/queues/{name}", "status": "200"}
    assert counts[frozenset(route.items())] == 6


def test_consumers_waiting_for_a_message(
    db: sluice.Database, client: TestClient, admin: dict[str, str]
) -> None:
    db.create_queue("orders")
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(db.queue("orders").get(wait=30)))
    waiter.start()
    deadline = time.monotonic() + 10
    while db.context.wakeups.waiting().get("orders") != 1:  # until it has blocked
        assert time.monotonic() < deadline, "the consumer never started waiting"
        time.sleep(0.001)
    assert at(scrape(client, admin)["sluice_queue_waiting_consumers"], queue="orders") == 1
    db.queue("orders").put("wake up")
    waiter.join(10)
    (message,) = got
    assert message is not None
    assert at(scrape(client, admin)["sluice_queue_waiting_consumers"], queue="orders") == 0
