"""OpenTelemetry tracing and metrics for sluice: spans and metrics of the messaging
semantic conventions, and the producer's trace context carried to its consumers in
each message's properties (W3C ``traceparent``, ``tracestate``).

Off by default. ``instrument(db)`` turns it on for one Database, ``instrument()`` for
every Database connected afterwards, and so does the environment variable
``SLUICE_OTEL=1`` (read when a Database connects). Needs the ``otel`` extra; without
it, importing this module raises ``sluice.MissingDependency`` naming the extra.
Spans and metrics go to the tracer and meter providers given, or else to
OpenTelemetry's global ones (docs/observability.md).
"""

from __future__ import annotations

from sluice.extras import load

load("opentelemetry.trace", "otel", "sluice's OpenTelemetry instrumentation")

from collections.abc import Iterator  # noqa: E402  (after the check above)
from contextlib import contextmanager  # noqa: E402

from opentelemetry import metrics, trace  # noqa: E402

import sluice  # noqa: E402
from sluice.contrib.otel.names import SEMCONV_PACKAGE, SEMCONV_VERSION  # noqa: E402
from sluice.contrib.otel.observer import OtelObserver  # noqa: E402

__all__ = [
    "SEMCONV_PACKAGE",
    "SEMCONV_VERSION",
    "OtelObserver",
    "instrument",
    "observer",
    "process",
    "uninstrument",
]


def instrument(
    db: sluice.Database | None = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> OtelObserver:
    """Turn telemetry on for ``db``, or (None) for every Database connected from now on;
    returns the observer. The providers default to OpenTelemetry's global ones."""
    made = OtelObserver(tracer_provider, meter_provider)
    if db is None:
        sluice.set_default_observer(made)
    else:
        db.observer = made
    return made


def uninstrument(db: sluice.Database | None = None) -> None:
    """Turn telemetry off for ``db``, or (None) for Databases connected from now on."""
    if db is None:
        sluice.set_default_observer(None)
    else:
        db.observer = None


def observer() -> OtelObserver:
    """An observer over the global providers: what ``SLUICE_OTEL=1`` gives each Database."""
    return OtelObserver()


@contextmanager
def process(db: sluice.Database, message: sluice.Message) -> Iterator[None]:
    """Process ``message`` inside the block: its ``process {destination}`` span is current
    there, the child of the message's creation context, so what the block enqueues is
    traced as this processing's work. Nothing is recorded while ``db``'s telemetry is off.
    """
    observing = db.observer
    if observing is None:
        yield
        return
    where = (
        observing.destination(message)
        if isinstance(observing, OtelObserver)
        else sluice.Destination(message.queue)
    )
    with observing.process(where, [message], operation="process"):
        yield
