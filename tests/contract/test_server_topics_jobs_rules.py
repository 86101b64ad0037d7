"""Topics and subscriptions, jobs and the rules application over HTTP
(sluice.server.topics, .jobs, .rules), on every backend."""

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
def client(db: sluice.Database) -> Iterator[TestClient]:
    db.clock = ManualClock(T0)
    with TestClient(create_app(db)) as client:
        yield client


def test_a_topic_fans_out_to_its_subscriptions(client: TestClient, db: sluice.Database) -> None:
    admin = key(db, "root", admin=True)
    made = client.post("/api/topics", headers=admin, json={"name": "prices"})
    assert made.status_code == 201, made.text
    assert made.json()["kind"] == "topic"
    reader = key(db, "reader", "prices:consume,browse", "eu-prices:manage,consume")
    sub = client.post("/api/topics/prices/subscriptions", headers=reader,
                      json={"name": "eu-prices", "where": "body.region = 'eu'"})  # fmt: skip
    assert sub.status_code == 201, sub.text
    assert sub.json()["lag"] == 0
    client.post("/api/topics/prices/subscriptions", headers=admin, json={"name": "all-prices"})
    writer = key(db, "writer", "prices:produce")
    client.post("/api/queues/prices/messages", headers=writer, json={"messages": [
        {"body": {"region": "eu", "p": 1}}, {"body": {"region": "us", "p": 2}}]})  # fmt: skip
    lags = {s["name"]: s["lag"] for s in client.get(
        "/api/topics/prices/subscriptions", headers=reader).json()}  # fmt: skip
    assert lags == {"all-prices": 2, "eu-prices": 1}
    (m,) = client.post("/api/queues/eu-prices/leases", headers=reader,
                       json={"limit": 10}).json()["messages"]  # fmt: skip
    assert m["body"] == {"region": "eu", "p": 1}
    assert client.post(f"/api/leases/{m['token']}/ack", headers=reader).status_code == 204
    problem(client.delete("/api/subscriptions/all-prices", headers=reader), 403)
    assert client.delete("/api/subscriptions/eu-prices", headers=reader).status_code == 204
    names = [s["name"] for s in client.get("/api/topics/prices/subscriptions",
                                           headers=admin).json()]  # fmt: skip
    assert names == ["all-prices"]
    bad = {"name": "bad", "where": "body.region ="}
    made_bad = client.post("/api/topics/prices/subscriptions", headers=admin, json=bad)
    problem(made_bad, 422, "ExpressionError")
    problem(client.get("/api/topics/nowhere/subscriptions", headers=admin), 404)


def test_a_job_is_submitted_and_followed(client: TestClient, db: sluice.Database) -> None:
    db.jobs.define("resize", queue="images")
    submitter = key(db, "app", "images:produce")
    made = client.post("/api/jobs", headers=submitter, json={
        "name": "album", "tasks": [{"type": "resize", "body": {"n": n}} for n in range(3)],
        "info": {"album": 7}})  # fmt: skip
    assert made.status_code == 201, made.text
    job = made.json()
    assert (job["total"], job["status"], job["progress"]) == (3, "pending", 0.0)
    assert db.queue("images").stats()["ready"] == 3
    problem(client.get(f"/api/jobs/{job['id']}", headers=submitter), 403)  # reading: admin
    admin = key(db, "root", admin=True)
    task = db.queue("images").get()
    assert task is not None
    assert [j["id"] for j in client.get("/api/jobs", headers=admin).json()] == [job["id"]]
    assert client.get(f"/api/jobs/{job['id']}", headers=admin).json()["info"] == {"album": 7}
    problem(client.get("/api/jobs/nope", headers=admin), 404)
    stranger = key(db, "stranger", "other:produce")
    problem(client.post("/api/jobs", headers=stranger,
                        json={"name": "x", "tasks": [{"type": "resize"}]}), 403)  # fmt: skip
    unknown = {"name": "x", "tasks": [{"type": "nope"}]}
    problem(client.post("/api/jobs", headers=admin, json=unknown), 422, "UnknownTaskType")
    task.release()


def test_the_rules_application_is_applied_and_read_by_an_admin(
    client: TestClient, db: sluice.Database
) -> None:
    admin = key(db, "root", admin=True)
    text = """
        CREATE QUEUE orders; CREATE QUEUE billing;
        CREATE RULE bill FOR orders IF body.total > 0 THEN ENQUEUE body INTO billing;
    """
    applied = client.post("/api/rules", headers=admin, json={"text": text})
    assert applied.status_code == 200, applied.text
    assert [r["name"] for r in applied.json()["rules"]] == ["bill"]
    assert [r["name"] for r in client.get("/api/rules", headers=admin).json()["rules"]] == ["bill"]
    db.queue("orders").put({"total": 3})
    db.rules.run_until_idle()
    assert [m.body for m in db.queue("billing").browse()] == [{"total": 3}]
    wrong = {"text": "CREATE RULE x FOR nowhere IF true THEN RESET;"}
    doc = problem(client.post("/api/rules", headers=admin, json=wrong), 422)
    assert "line 1" in doc["detail"]
    app = key(db, "app", "*:produce,consume,browse,manage")
    problem(client.get("/api/rules", headers=app), 403)
    problem(client.post("/api/rules", headers=app, json={"text": text}), 403)


def test_profiles_are_set_read_and_cleared(client: TestClient, db: sluice.Database) -> None:
    admin = key(db, "root", admin=True)

    @db.task("send_email")
    def send(body: object) -> None:
        pass

    given = {
        "entries": [{"days": "mon-fri", "window": "08:00-18:00", "tz": "Europe/Berlin",
                     "max_per_hour": 5},
                    {"days": "fri", "window": "22:00-24:00", "max_per_hour": 50,
                     "follow": {"signal": "web_rpm", "capacity": 1000.0}}],
        "default_per_hour": 1000,
        "default_per_cycle": 3,
    }  # fmt: skip
    problem(client.get("/api/profiles/send_email", headers=admin), 404, "NoProfile")
    set_ = client.put("/api/profiles/send_email", headers=admin, json=given)
    assert set_.status_code == 200, set_.text
    read = client.get("/api/profiles/send_email", headers=admin).json()
    assert read == set_.json()
    assert read["entries"][0]["days"] == "mon,tue,wed,thu,fri"
    assert read["entries"][1]["window"] == "22:00-24:00"
    assert db.jobs.profile("send_email") is not None
    # T0 is a Friday 09:00 in Berlin: the working-hours entry is in force, in place of
    # the defaults (so no cap per cycle).
    db.jobs.submit("burst", [("send_email", {"n": n}) for n in range(7)])
    assert db.worker().run_until_idle() == 5
    now = client.get("/api/profiles", headers=admin).json()[0]["now"]
    assert now["hour"] == {**now["hour"], "limit": 5, "starts": 5}
    assert now["cycle"]["limit"] is None
    # What was read back can be sent again as it is.
    again = {k: read[k] for k in given}
    sent_again = client.put("/api/profiles/send_email", headers=admin, json=again).json()
    assert {k: sent_again[k] for k in given} == again

    problem(client.put("/api/profiles/send_email", headers=admin,
                       json={"entries": [{"days": "mon-xyz", "window": "*"}]}), 422)  # fmt: skip
    problem(client.put("/api/profiles/nothing", headers=admin, json={}), 422, "UnknownTaskType")
    problem(client.get("/api/profiles/nothing", headers=admin), 404, "UnknownTaskType")
    problem(client.get("/api/profiles", headers=key(db, "app", "*:produce")), 403)
    problem(client.get("/api/profiles"), 401)
    assert client.delete("/api/profiles/send_email", headers=admin).status_code == 204
    assert db.jobs.profile("send_email") is None
    problem(client.delete("/api/profiles/send_email", headers=admin), 404, "NoProfile")
