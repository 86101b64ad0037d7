"""What the OpenTelemetry tests share: an SDK with in-memory exporters, and readers of
what it recorded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sluice
from sluice.contrib import otel


@dataclass
class Telemetry:
    """An SDK whose spans and metrics stay in memory."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    spans_exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    @classmethod
    def make(cls) -> Telemetry:
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        reader = InMemoryMetricReader()
        return cls(tracer_provider, MeterProvider(metric_readers=[reader]), exporter, reader)

    def instrument(self, db: sluice.Database) -> otel.OtelObserver:
        return otel.instrument(
            db, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.spans_exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.spans(name)
        return span

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], float]]]:
        """Each metric's points: (attributes, value for a counter or count for a histogram)."""
        found: dict[str, list[tuple[dict[str, Any], float]]] = {}
        data = self.reader.get_metrics_data()
        if data is None:  # nothing was ever recorded
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    points = found.setdefault(metric.name, [])
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = point.count  # type: ignore[union-attr]
                        points.append((dict(point.attributes or {}), float(value)))
        return found


def linked(span: ReadableSpan) -> list[int]:
    """The span ids ``span`` links to."""
    return [link.context.span_id for link in span.links]


def ids(spans: Sequence[ReadableSpan]) -> list[int]:
    return [s.context.span_id for s in spans if s.context is not None]
