"""A request's trace context carried into what it enqueues: with telemetry on
(engine/observe.py), a request with a W3C ``traceparent`` header has its enqueue's send
span made under it, so the trace goes from the HTTP client on to the message's consumers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ParamSpec, TypeVar

import sluice
from sluice.engine.observe import TRACE_PROPERTIES

__all__ = ["traced"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def traced(
    db: sluice.Database, headers: Mapping[str, str], work: Callable[_P, _T]
) -> Callable[_P, _T]:
    """``work``, run under the trace context of ``headers`` when telemetry is on and the
    request has one; else ``work`` itself (the common case pays one check)."""
    observer = db.observer
    if observer is None or "traceparent" not in headers:
        return work
    carrier = {name: headers[name] for name in TRACE_PROPERTIES if name in headers}

    def run(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        # In the thread that runs it: the offload pool's threads share no context.
        with observer.incoming(carrier):
            return work(*args, **kwargs)

    return run
