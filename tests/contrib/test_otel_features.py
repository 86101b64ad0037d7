"""OpenTelemetry through sluice's features (docs/observability.md): a rule's actions carry
their trigger's context, a job's run is a process span, the HTTP API enqueues under a
request's traceparent, an outgoing http gateway forwards it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import sluice
from sluice import ManualClock
from sluice.contrib.otel import names
from sluice.jobs import Task

from .otel_support import Telemetry, linked

T0 = 1_700_000_000.0
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

ROUTING = """
CREATE QUEUE orders;
CREATE QUEUE billing;
CREATE RULE route FOR orders IF body.total > 0 THEN
  ENQUEUE json_object('order', body.id) INTO billing;
"""

# A slicing reset: the batch goes by waves of Python decisions (no SQL enqueue).
SEQUENTIAL = """
CREATE QUEUE orders;
CREATE QUEUE billing;
CREATE PROPERTY customer AS text QUEUE orders VALUE body.customer;
CREATE SLICING byCustomer ON customer;
CREATE RULE route FOR byCustomer IF body.total > 0 THEN
  ENQUEUE json_object('order', body.id) INTO billing, RESET;
"""


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry.make()


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def db(
    request: pytest.FixtureRequest, tmp_path: Path, telemetry: Telemetry
) -> Iterator[sluice.Database]:
    from tests.conftest import url_for

    with sluice.connect(url_for(request.param, tmp_path, request)) as database:
        database.clock = ManualClock(T0)
        telemetry.instrument(database)
        yield database


@pytest.mark.parametrize("definition", [ROUTING, SEQUENTIAL], ids=["sql", "python"])
def test_a_rules_action_carries_its_triggers_context(
    db: sluice.Database, telemetry: Telemetry, definition: str
) -> None:
    db.apply(definition)
    sent = [db.queue("orders").put({"id": n, "total": 10, "customer": "c"}) for n in (1, 2)]
    assert db.rules.run_until_idle().processed == 2
    sends = {str(s.attributes[names.MESSAGE_ID]): s for s in telemetry.spans("send orders")
             if s.attributes}  # fmt: skip
    made = db.get_many(["billing"], limit=2)
    assert len(made) == 2
    for m in made:
        trigger = sends[sent[m.body["order"] - 1]]
        assert trigger.context is not None
        assert m.properties["traceparent"].split("-")[2] == f"{trigger.context.span_id:016x}"
    receive = telemetry.one("receive billing")
    assert sorted(linked(receive)) == sorted(
        s.context.span_id for s in sends.values() if s.context is not None
    )
    processes = telemetry.spans("process orders")
    assert processes
    for span in processes:
        assert span.attributes is not None
        assert span.attributes[names.OPERATION_NAME] == "rules"
    counts = [s.attributes.get(names.BATCH_MESSAGE_COUNT, 1) for s in processes if s.attributes]
    assert sum(c for c in counts if isinstance(c, int)) == 2


def test_rules_without_telemetry_add_no_context(tmp_path: Path, telemetry: Telemetry) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        db.clock = ManualClock(T0)
        db.apply(ROUTING)
        db.queue("orders").put({"id": 1, "total": 10}, properties={"traceparent": PARENT})
        db.rules.run_until_idle()
        (m,) = db.queue("billing").browse()
        assert "traceparent" not in m.properties
        telemetry.instrument(db)  # on now: compiled again, and made messages inherit it
        db.queue("orders").put({"id": 2, "total": 10}, properties={"traceparent": PARENT})
        db.rules.run_until_idle()
        _, made = db.queue("billing").browse()
        assert made.properties["traceparent"] == PARENT


def test_a_jobs_task_runs_in_a_process_span(db: sluice.Database, telemetry: Telemetry) -> None:
    inner: list[str] = []

    @db.task("mail")
    def mail(task: Task) -> None:
        from opentelemetry import trace

        inner.append(f"{trace.get_current_span().get_span_context().span_id:016x}")
        if task.body == "boom":
            raise RuntimeError("smtp refused")

    db.jobs.submit("report", [("mail", "a"), ("mail", "boom")])
    db.worker().run_until_idle(max_tasks=2)
    spans = telemetry.spans("process mail")
    assert len(spans) == 2
    ok, failed = sorted(spans, key=lambda s: s.status.status_code.value)
    assert ok.attributes is not None
    assert failed.attributes is not None
    assert ok.attributes[names.OPERATION_TYPE] == "process"
    assert failed.attributes[names.ERROR_TYPE] == "RuntimeError"
    assert {f"{s.context.span_id:016x}" for s in spans if s.context} == set(inner)
    sends = telemetry.spans()
    for span in spans:  # each the child of its task's send
        assert span.parent is not None
        assert span.parent.span_id in {s.context.span_id for s in sends if s.context}
        assert span.attributes is not None
        assert span.attributes[names.DESTINATION_NAME] == "tasks.mail"  # the task's queue


def test_the_http_api_enqueues_under_the_requests_traceparent(
    db: sluice.Database, telemetry: Telemetry
) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from sluice.server.app import create_app

    db.create_queue("orders")
    with TestClient(create_app(db, auth=False)) as client:
        done = client.post(
            "/api/queues/orders/messages",
            json={"messages": [{"body": {"n": 1}}]},
            headers={"traceparent": PARENT},
        )
        assert done.status_code == 201, done.text
        plain = client.post("/api/queues/orders/messages", json={"messages": [{"body": 2}]})
        assert plain.status_code == 201, plain.text
    first, second = telemetry.spans("send orders")
    assert first.parent is not None
    assert first.parent.span_id == 0xB7AD6B7169203331
    assert first.context is not None
    assert first.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert second.parent is None
    m = db.queue("orders").get()
    assert m is not None
    assert m.properties["traceparent"].split("-")[1] == PARENT.split("-")[1]


def test_an_outgoing_http_gateway_forwards_the_context(
    db: sluice.Database, telemetry: Telemetry
) -> None:
    pytest.importorskip("uvicorn")
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from tests.live_server import serve

    got: list[dict[str, str]] = []

    async def endpoint(request: Request) -> Response:
        got.append(dict(request.headers))
        return Response(b"", status_code=200)

    app = Starlette(routes=[Route("/in", endpoint, methods=["POST"])])
    with serve(app) as base:
        db.create_queue("outbox")
        db.gateways.define("outbox", direction="out", transport="http", url=f"{base}/in")
        db.queue("outbox").put({"n": 1})
        assert db.gateways.run_until_idle() == 1
    send = telemetry.one("send outbox")
    assert send.context is not None
    ((headers),) = got
    assert headers["traceparent"].split("-")[2] == f"{send.context.span_id:016x}"
