"""OpenTelemetry on the engine (sluice.contrib.otel, docs/observability.md): the spans and
metrics of the messaging conventions, named as the conventions package of the pinned
version names them, and the trace context from producer to consumer."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.semconv import schemas
from opentelemetry.semconv._incubating.attributes import messaging_attributes as ma
from opentelemetry.semconv._incubating.metrics import messaging_metrics as mm
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.semconv.version import __version__ as semconv_version
from opentelemetry.trace import SpanKind, StatusCode

import sluice
from sluice.contrib import otel
from sluice.contrib.otel import names
from sluice.extras import install_hint

from .otel_support import Telemetry, linked

BACKENDS = ["memory", "sqlite", "postgresql"]


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry.make()


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    from tests.conftest import url_for

    return url_for(request.param, tmp_path, request)


@pytest.fixture
def db(url: str, telemetry: Telemetry) -> Iterator[sluice.Database]:
    with sluice.connect(url) as database:
        telemetry.instrument(database)
        yield database


# --- names -------------------------------------------------------------------------
def test_the_names_are_the_pinned_conventions() -> None:
    assert semconv_version == names.SEMCONV_PACKAGE == otel.SEMCONV_PACKAGE
    assert schemas.Schemas.V1_44_0.value == names.SCHEMA_URL
    assert list(schemas.Schemas)[-1] is schemas.Schemas.V1_44_0  # the package's newest
    pairs = {
        names.SYSTEM: ma.MESSAGING_SYSTEM,
        names.DESTINATION_NAME: ma.MESSAGING_DESTINATION_NAME,
        names.SUBSCRIPTION_NAME: ma.MESSAGING_DESTINATION_SUBSCRIPTION_NAME,
        names.OPERATION_TYPE: ma.MESSAGING_OPERATION_TYPE,
        names.OPERATION_NAME: ma.MESSAGING_OPERATION_NAME,
        names.MESSAGE_ID: ma.MESSAGING_MESSAGE_ID,
        names.BATCH_MESSAGE_COUNT: ma.MESSAGING_BATCH_MESSAGE_COUNT,
        names.ERROR_TYPE: error_attributes.ERROR_TYPE,
        names.SENT_MESSAGES: mm.MESSAGING_CLIENT_SENT_MESSAGES,
        names.CONSUMED_MESSAGES: mm.MESSAGING_CLIENT_CONSUMED_MESSAGES,
        names.OPERATION_DURATION: mm.MESSAGING_CLIENT_OPERATION_DURATION,
        names.PROCESS_DURATION: mm.MESSAGING_PROCESS_DURATION,
    }
    for ours, theirs in pairs.items():
        assert ours == theirs
    types = {v.value for v in ma.MessagingOperationTypeValues}
    assert {"send", "receive", "process", "settle"} <= types


# --- producer to consumer ------------------------------------------------------------
def test_send_receive_process_settle_across_two_connections(
    tmp_path: Path, telemetry: Telemetry
) -> None:
    """A producer and a consumer process, simulated by two connections to one file."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with sluice.connect(url) as producer, sluice.connect(url) as consumer:
        telemetry.instrument(producer)
        telemetry.instrument(consumer)
        producer.create_queue("orders")
        tracer = telemetry.tracer_provider.get_tracer("test")
        with tracer.start_as_current_span("checkout") as checkout:
            message_id = producer.queue("orders").put({"order": 1})
        m = consumer.queue("orders").get()
        assert m is not None
        assert m.id == message_id
        with otel.process(consumer, m):
            pass
        m.ack()

    send = telemetry.one("send orders")
    receive = telemetry.one("receive orders")
    process = telemetry.one("process orders")
    settle = telemetry.one("settle orders")
    assert send.kind is SpanKind.PRODUCER
    assert receive.kind is SpanKind.CLIENT
    assert process.kind is SpanKind.CONSUMER
    assert settle.kind is SpanKind.CLIENT
    # The send is the checkout's child, and the message carries the send's context.
    assert send.parent is not None
    assert send.parent.span_id == checkout.get_span_context().span_id
    assert send.context is not None
    assert process.context is not None
    assert m.properties["traceparent"].split("-")[2] == f"{send.context.span_id:016x}"
    # The receive links to it; the process is its child and links to it too.
    assert linked(receive) == [send.context.span_id]
    assert process.parent is not None
    assert process.parent.span_id == send.context.span_id
    assert process.context.trace_id == send.context.trace_id
    assert linked(process) == [send.context.span_id]
    for span, kind in ((send, "send"), (receive, "receive"), (process, "process")):
        assert span.attributes is not None
        assert span.attributes[names.SYSTEM] == "sluice"
        assert span.attributes[names.DESTINATION_NAME] == "orders"
        assert span.attributes[names.OPERATION_TYPE] == kind
        assert span.attributes[names.OPERATION_NAME] == kind
        assert span.attributes[names.MESSAGE_ID] == message_id
    assert settle.attributes is not None
    assert settle.attributes[names.OPERATION_TYPE] == "settle"
    assert settle.attributes[names.SETTLE_OUTCOME] == "ack"
    assert settle.attributes[names.MESSAGE_ID] == message_id

    found = telemetry.metrics()
    sent = found[names.SENT_MESSAGES]
    assert [(a[names.DESTINATION_NAME], v) for a, v in sent] == [("orders", 1.0)]
    assert [v for _, v in found[names.CONSUMED_MESSAGES]] == [1.0]
    durations = {a[names.OPERATION_TYPE]: v for a, v in found[names.OPERATION_DURATION]}
    assert durations == {"send": 1.0, "receive": 1.0, "settle": 1.0}
    assert [v for _, v in found[names.PROCESS_DURATION]] == [1.0]
    assert all(names.MESSAGE_ID not in a for points in found.values() for a, _ in points)


def test_a_batch_is_one_span_with_its_count(db: sluice.Database, telemetry: Telemetry) -> None:
    db.create_queue("orders")
    ids = db.queue("orders").put_many([1, 2, 3])
    taken = db.get_many(["orders"], limit=3)
    assert [m.id for m in taken] == ids
    assert db.ack_many(taken) == [None, None, None]

    send = telemetry.one("send orders")
    assert send.attributes is not None
    assert send.context is not None
    assert send.attributes[names.BATCH_MESSAGE_COUNT] == 3
    assert names.MESSAGE_ID not in send.attributes
    assert {m.properties["traceparent"] for m in taken} == {taken[0].properties["traceparent"]}
    receive = telemetry.one("receive orders")
    assert receive.attributes is not None
    assert receive.attributes[names.BATCH_MESSAGE_COUNT] == 3
    assert linked(receive) == [send.context.span_id] * 3
    settles = telemetry.spans("settle orders")
    assert sorted(str(s.attributes[names.MESSAGE_ID]) for s in settles if s.attributes) == ids
    sent = telemetry.metrics()[names.SENT_MESSAGES]
    assert [v for _, v in sent] == [3.0]


def test_a_transaction_sends_at_commit_and_an_abort_fails_its_send(
    db: sluice.Database, telemetry: Telemetry
) -> None:
    db.create_queue("orders")
    with db.transaction() as tx:
        tx.enqueue("orders", "kept")
        assert telemetry.spans() == []  # not sent until the commit
    with pytest.raises(RuntimeError), db.transaction() as tx:
        tx.enqueue("orders", "dropped")
        raise RuntimeError("changed my mind")
    kept, dropped = telemetry.spans("send orders")
    assert kept.status.status_code is StatusCode.UNSET
    assert dropped.status.status_code is StatusCode.ERROR
    assert dropped.attributes is not None
    assert dropped.attributes[names.ERROR_TYPE] == "TransactionError"
    sent = {a.get(names.ERROR_TYPE): v for a, v in telemetry.metrics()[names.SENT_MESSAGES]}
    assert sent == {None: 1.0, "TransactionError": 1.0}


def test_release_and_reject_are_settles_with_their_outcome(
    db: sluice.Database, telemetry: Telemetry
) -> None:
    q = db.create_queue("orders", max_attempts=5)
    q.put_many(["a", "b"])
    first = q.get()
    assert first is not None
    first.release()
    second = q.get()
    assert second is not None
    second.reject("bad")
    outcomes = sorted(
        str(s.attributes[names.SETTLE_OUTCOME]) for s in telemetry.spans("settle orders")
        if s.attributes
    )  # fmt: skip
    assert outcomes == ["reject", "release"]


def test_a_subscription_names_its_topic_and_itself(
    db: sluice.Database, telemetry: Telemetry
) -> None:
    db.create_topic("prices")
    db.subscribe("prices", "shop")
    db.queue("prices").put({"sku": "A", "price": 3})
    m = db.queue("shop").get()
    assert m is not None
    with otel.process(db, m):
        pass
    m.ack()
    assert telemetry.spans("send prices")
    for name in ("receive prices", "process prices", "settle prices"):
        attributes = telemetry.one(name).attributes
        assert attributes is not None
        assert attributes[names.DESTINATION_NAME] == "prices"
        assert attributes[names.SUBSCRIPTION_NAME] == "shop"


def test_a_forwarded_message_keeps_its_creation_context(
    db: sluice.Database, telemetry: Telemetry
) -> None:
    db.create_queue("orders")
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    db.queue("orders").put("x", properties={"traceparent": given})
    m = db.queue("orders").get()
    assert m is not None
    assert m.properties["traceparent"] == given
    assert linked(telemetry.one("receive orders")) == [0xB7AD6B7169203331]


# --- off ------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_off_records_nothing_and_adds_nothing(
    backend: str, tmp_path: Path, telemetry: Telemetry
) -> None:
    url = "memory://" if backend == "memory" else f"sqlite:///{tmp_path / 'q.db'}"
    with sluice.connect(url) as db:
        assert db.observer is None  # the default
        telemetry.instrument(db)
        otel.uninstrument(db)
        assert db.observer is None
        q = db.create_queue("orders")
        tracer = telemetry.tracer_provider.get_tracer("test")
        with tracer.start_as_current_span("user"):
            q.put({"a": 1}, properties={"k": "v"})
            q.put("b")
        m = q.get()
        assert m is not None
        assert m.properties == {"k": "v"}
        with otel.process(db, m):
            pass
        m.ack()
        n = q.get()
        assert n is not None
        assert n.properties == {}
        n.ack()
    assert [s.name for s in telemetry.spans()] == ["user"]
    assert telemetry.metrics() == {}


def test_the_environment_turns_it_on_for_every_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLUICE_OTEL", "1")
    try:
        with sluice.connect("memory://") as db:
            assert isinstance(db.observer, otel.OtelObserver)
        monkeypatch.setenv("SLUICE_OTEL", "0")
        otel.uninstrument()
        with sluice.connect("memory://") as db:
            assert db.observer is None
        monkeypatch.setenv("SLUICE_OTEL", "maybe")
        with pytest.raises(sluice.ConfigurationError, match="SLUICE_OTEL must be 1"):
            sluice.connect("memory://")
    finally:
        sluice.set_default_observer(None)


def test_instrument_without_a_database_is_for_those_connected_later(
    telemetry: Telemetry,
) -> None:
    with sluice.connect("memory://") as before:
        made = otel.instrument(tracer_provider=telemetry.tracer_provider)
        try:
            with sluice.connect("memory://") as after:
                assert after.observer is made
            assert before.observer is None
        finally:
            otel.uninstrument()
    with sluice.connect("memory://") as later:
        assert later.observer is None


def test_without_opentelemetry_turning_it_on_names_the_extra() -> None:
    for code in (
        "import sluice.contrib.otel",
        "import os, sluice; os.environ['SLUICE_OTEL'] = '1'; sluice.connect('memory://')",
    ):
        blocked = "import sys; sys.modules['opentelemetry.trace'] = None\n"
        done = subprocess.run(
            [sys.executable, "-c", blocked + code], capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 1
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("sluice.errors.MissingDependency: "), last
        assert "the 'otel' extra" in last
        assert install_hint("otel") in last


def test_the_current_span_is_not_required(db: sluice.Database, telemetry: Telemetry) -> None:
    """With no span current the send is a root, and its context still travels."""
    assert not trace.get_current_span().get_span_context().is_valid
    db.create_queue("orders")
    db.queue("orders").put(1)
    send = telemetry.one("send orders")
    assert send.parent is None
    m = db.queue("orders").get()
    assert m is not None
    assert "traceparent" in m.properties
