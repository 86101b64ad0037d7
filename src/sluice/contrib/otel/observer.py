"""sluice's engine observer over OpenTelemetry: the spans and metrics of the messaging
semantic conventions (names.py), and the W3C trace context carried in message properties.

A producer's send span is injected into the properties of the messages it sends
(unless they carry a creation context already: a forwarded message keeps its own).
A consumer's receive span links to each message's creation context; a process span
is the child of its one message's creation context (and links to it), or links to
each of a batch's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import sluice
from sluice.contrib.otel import names

__all__ = ["OtelObserver"]

_PROPAGATOR = TraceContextTextMapPropagator()
_SCOPE = "sluice.contrib.otel"


class _Operation:
    """One send, settle or process under way: its span and what its metrics record."""

    __slots__ = ("_attributes", "_ended", "_histogram", "_observer", "_sent", "_span", "_start")

    def __init__(
        self,
        observer: OtelObserver,
        span: trace.Span,
        attributes: dict[str, Any],
        *,
        histogram: metrics.Histogram,
        sent: int = 0,
    ) -> None:
        self._observer = observer
        self._span = span
        self._attributes = attributes  # the metrics' (low cardinality: no message ids)
        self._histogram = histogram
        self._sent = sent
        self._start = time.perf_counter()
        self._ended = False

    def count(self, messages: int) -> None:
        if messages != 1:
            self._span.set_attribute(names.BATCH_MESSAGE_COUNT, messages)

    def end(self, error: BaseException | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        attributes = self._attributes
        if error is not None:
            attributes = {**attributes, names.ERROR_TYPE: type(error).__qualname__}
            self._span.set_status(Status(StatusCode.ERROR, str(error)))
            self._span.set_attribute(names.ERROR_TYPE, type(error).__qualname__)
        self._histogram.record(time.perf_counter() - self._start, attributes)
        if self._sent:
            self._observer.sent_messages.add(self._sent, attributes)
        self._span.end()


class OtelObserver:
    """An ``sluice.Observer`` that makes OpenTelemetry spans and metrics (module doc)."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer = trace.get_tracer(
            _SCOPE, sluice.__version__, tracer_provider, schema_url=names.SCHEMA_URL
        )
        meter = metrics.get_meter(
            _SCOPE, sluice.__version__, meter_provider, schema_url=names.SCHEMA_URL
        )
        self.sent_messages = meter.create_counter(
            names.SENT_MESSAGES, "{message}", "Number of messages producers sent to sluice."
        )
        self.consumed_messages = meter.create_counter(
            names.CONSUMED_MESSAGES, "{message}", "Number of messages sluice delivered."
        )
        self.operation_duration = meter.create_histogram(
            names.OPERATION_DURATION, "s", "Duration of a send, receive or settle."
        )
        self.process_duration = meter.create_histogram(
            names.PROCESS_DURATION, "s", "Duration of processing messages."
        )
        self._destinations: dict[str, sluice.Destination] = {}
        self._lock = threading.Lock()

    # --- the engine's hooks (sluice.Observer) ------------------------------------------
    def send(
        self, destination: sluice.Destination, ids: Sequence[str], properties: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, _Operation]:
        attributes = _attributes("send", "send", destination)
        span = self.tracer.start_span(
            _name("send", destination), kind=SpanKind.PRODUCER,
            attributes={**attributes, **_identity(ids)},
        )  # fmt: skip
        if properties is None or "traceparent" not in properties:
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
            if carrier:
                properties = {**(properties or {}), **carrier}
        operation = _Operation(
            self, span, attributes, histogram=self.operation_duration, sent=len(ids)
        )
        return properties, operation

    def received(
        self, destination: sluice.Destination, messages: Sequence[sluice.Message], started: int
    ) -> None:
        attributes = _attributes("receive", "receive", destination)
        for message in messages:
            if message.queue not in self._destinations:  # for process(): a topic's name
                with self._lock:
                    self._destinations[message.queue] = destination
        span = self.tracer.start_span(
            _name("receive", destination), kind=SpanKind.CLIENT, start_time=started,
            attributes={**attributes, **_identity([m.id for m in messages])},
            links=_links(messages),
        )  # fmt: skip
        span.end()
        self.operation_duration.record((time.time_ns() - started) / 1e9, attributes)
        self.consumed_messages.add(len(messages), attributes)

    def settle(
        self,
        operation: str,
        destination: sluice.Destination | None,
        messages: Sequence[sluice.Message],
    ) -> _Operation:
        attributes = _attributes("settle", "settle", destination)
        span = self.tracer.start_span(
            _name("settle", destination), kind=SpanKind.CLIENT,
            attributes={**attributes, names.SETTLE_OUTCOME: operation,
                        **_identity([m.id for m in messages])},
        )  # fmt: skip
        return _Operation(self, span, attributes, histogram=self.operation_duration)

    @contextmanager
    def process(
        self,
        destination: sluice.Destination,
        messages: Sequence[sluice.Message],
        *,
        operation: str,
        target: str | None = None,
    ) -> Iterator[_Operation]:
        attributes = _attributes("process", operation, destination)
        parent = _creation(messages[0]) if len(messages) == 1 else None
        span = self.tracer.start_span(
            f"process {target or destination.name}", context=parent, kind=SpanKind.CONSUMER,
            attributes={**attributes, **_identity([m.id for m in messages])},
            links=_links(messages),
        )  # fmt: skip
        done = _Operation(self, span, attributes, histogram=self.process_duration)
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield done
        except BaseException as exc:
            done.end(exc)
            raise
        finally:
            otel_context.detach(token)
            done.end()

    @contextmanager
    def incoming(self, headers: Mapping[str, str]) -> Iterator[None]:
        found = _PROPAGATOR.extract({k: headers[k] for k in ("traceparent", "tracestate")
                                     if k in headers})  # fmt: skip
        token = otel_context.attach(found)
        try:
            yield
        finally:
            otel_context.detach(token)

    # --- for sluice.contrib.otel.process ------------------------------------------------
    def destination(self, message: sluice.Message) -> sluice.Destination:
        """The destination ``message`` was received from (a subscription's topic)."""
        return self._destinations.get(message.queue) or sluice.Destination(message.queue)


def _attributes(
    kind: str, operation: str, destination: sluice.Destination | None
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        names.SYSTEM: names.SYSTEM_NAME,
        names.OPERATION_TYPE: kind,
        names.OPERATION_NAME: operation,
    }
    if destination is not None:
        attributes[names.DESTINATION_NAME] = destination.name
        if destination.subscription is not None:
            attributes[names.SUBSCRIPTION_NAME] = destination.subscription
    return attributes


def _identity(ids: Sequence[str]) -> dict[str, Any]:
    """One message's id, or a batch's size (the conventions name no list of ids)."""
    if len(ids) == 1:
        return {names.MESSAGE_ID: ids[0]}
    return {names.BATCH_MESSAGE_COUNT: len(ids)}


def _name(kind: str, destination: sluice.Destination | None) -> str:
    return kind if destination is None else f"{kind} {destination.name}"


def _creation(message: sluice.Message) -> Context | None:
    """The creation context ``message`` carries, or None."""
    props = message.properties
    if not isinstance(props, dict) or "traceparent" not in props:
        return None
    carrier = {k: props[k] for k in ("traceparent", "tracestate") if isinstance(props.get(k), str)}
    found = _PROPAGATOR.extract(carrier)
    return found if trace.get_current_span(found).get_span_context().is_valid else None


def _links(messages: Sequence[sluice.Message]) -> list[Link]:
    links = []
    for message in messages:
        found = _creation(message)
        if found is not None:
            links.append(Link(trace.get_current_span(found).get_span_context()))
    return links
