"""``GET /metrics`` in Prometheus' text format: the database's gauges (server.gauges),
the server's HTTP latency and messages counted by its routes (docs/server.md#metrics).

Counters and histograms live in each process; with ``PROMETHEUS_MULTIPROC_DIR`` set
(several workers) prometheus_client keeps them in files there, and any worker's
scrape sums every worker's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import sluice
from sluice.server.auth import KeyedRoute, caller
from sluice.server.gauges import Gauges
from sluice.server.grants import Principal
from sluice.server.problems import Problem

__all__ = ["OUTCOMES", "ServerMetrics", "count", "install", "router"]

router = APIRouter(tags=["metrics"], route_class=KeyedRoute)

Who = Annotated[Principal, Depends(caller)]

OUTCOMES = frozenset({"enqueued", "acked", "released", "rejected"})
"""What ``count`` counts of a queue's messages: those the server's routes enqueued,
and those they settled, by how."""

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Long polls wait up to 20 s: buckets beyond the default 10 s keep them apart.
_CHILDREN = 10_000  # series remembered by ServerMetrics.child
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ServerMetrics:
    """The series this process counts (``app.state.metrics``), apart from any other app's."""

    def __init__(self) -> None:
        # No registry: /metrics collects them itself, per scrape, for the key asking.
        self.duration = Histogram(
            "sluice_http_request_duration_seconds",
            "Time to answer a request, by method, route template and status",
            ("method", "route", "status"),
            registry=None,
            buckets=_BUCKETS,
        )
        self.in_flight = Gauge(
            "sluice_http_requests_in_flight",
            "Requests being answered, long polls for messages included",
            ("method",),
            registry=None,
            multiprocess_mode="livesum",  # only live workers' requests are in flight
        )
        self.messages = Counter(
            "sluice_messages",
            "Messages the server's routes enqueued or settled, by queue and outcome",
            ("queue", "outcome"),
            registry=None,
        )
        # Each request finds its series here: labels() takes a lock and builds a key.
        self._children: dict[tuple[str, ...], Any] = {}

    def child(self, metric: str, *labels: str) -> Any:
        """The series of ``metric`` ("duration", "in_flight", "messages") at ``labels``."""
        key = (metric, *labels)
        found = self._children.get(key)
        if found is None:
            found = getattr(self, metric).labels(*labels)
            if len(self._children) < _CHILDREN:  # bounded: a queue name is the client's
                self._children[key] = found
        return found

    def collectors(self) -> tuple[Collector, ...]:
        """This process's series; every worker's where they are kept in files."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            # prometheus_client leaves this constructor unannotated.
            return (MultiProcessCollector(None),)  # type: ignore[no-untyped-call]
        return (self.duration, self.in_flight, self.messages)


def count(request: Request, queue: str, outcome: str, n: int = 1) -> None:
    """Count ``n`` messages of ``queue`` that a route ``outcome`` (one of OUTCOMES)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}: one of {', '.join(sorted(OUTCOMES))}")
    metrics: ServerMetrics = request.app.state.metrics
    metrics.child("messages", queue, outcome).inc(n)


@router.get(
    "/metrics",
    summary="Series in Prometheus' text format (admin, or browse)",
    response_class=PlainTextResponse,
)
def metrics(request: Request, who: Who) -> Response:
    if not who.admin and not any("browse" in g.actions for g in who.grants):
        raise Problem(
            403,
            f"the key {who.name!r} may browse no queue: metrics need an admin key, "
            "or browse on the queues to show",
            error="Forbidden",
        )
    db: sluice.Database = request.app.state.db
    own: ServerMetrics = request.app.state.metrics
    parts: list[Collector] = [Gauges(db, who)]
    parts += [_Visible(c, who) for c in own.collectors()]
    return Response(generate_latest(_Scrape(parts)), media_type=CONTENT_TYPE_LATEST)


def install(app: FastAPI) -> None:
    """Serve ``/metrics`` and time every request of ``app``."""
    app.state.metrics = ServerMetrics()
    app.include_router(router)
    app.add_middleware(_Timed, metrics=app.state.metrics)


class _Scrape:
    """One scrape's collectors as one."""

    def __init__(self, parts: Iterable[Collector]) -> None:
        self._parts = tuple(parts)

    def collect(self) -> Iterator[Metric]:
        for part in self._parts:
            yield from part.collect()


class _Visible:
    """The samples of ``collector`` that ``who`` may see: an admin sees all; any other
    key only those of the queues it may browse, and none that name no queue."""

    def __init__(self, collector: Collector, who: Principal) -> None:
        self._collector = collector
        self._who = who

    def collect(self) -> Iterator[Metric]:
        for metric in self._collector.collect():
            if not self._who.admin:
                metric.samples = [
                    s
                    for s in metric.samples
                    if "queue" in s.labels and self._who.allows(s.labels["queue"], "browse")
                ]
            if metric.samples:
                yield metric


class _Timed:
    """Times every HTTP request by its route's template (never its path: one series per
    queue name or lease token would be unbounded), and counts those in flight."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in _METHODS else "other"
        status = 500  # unless a response starts: the app raised

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        # By method only: the route is known once the router has run, inside.
        in_flight = self.metrics.child("in_flight", method)
        in_flight.inc()
        started = time.perf_counter()
        try:
            await self.app(scope, receive, sent)
        finally:
            in_flight.dec()
            elapsed = time.perf_counter() - started
            # The router leaves the route it chose in the scope (a 405's too).
            route = getattr(scope.get("route"), "path", None)
            labels = (method, route if isinstance(route, str) else "unmatched", str(status))
            self.metrics.child("duration", *labels).observe(elapsed)
