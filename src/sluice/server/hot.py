"""The hottest routes, dispatched without FastAPI's routing and dependency solving.

FastAPI matches a request against every route in turn, then solves the route's
parameters and dependencies through pydantic: several hundred microseconds a request on
this project's machines, more than a durable SQLite commit of ten messages. The routes
every producer and consumer calls per message (enqueue, ack) are answered here instead:
one dictionary-free match on the path, then the *same* endpoint coroutine FastAPI would
call, so there is one implementation of each route and FastAPI still documents it (its
declaration stays in the app, and OpenAPI comes from it). Everything else falls through
to FastAPI unchanged.

Errors are answered by the app's own exception handlers (problems.install), found as
Starlette's exception middleware finds them, so a hot route's 401, 403, 404 or 422 is
the same problem document as any route's.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from fastapi import APIRouter, FastAPI, Request
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["Hot", "HotRoute", "Routes", "install"]

Endpoint = Callable[[Request, str], Awaitable[Response | None]]
"""A hot route's handler: the request and its one path parameter; None answers 204."""

Routes = tuple["HotRoute", ...]

_Handler = Callable[[Request, Exception], Response | Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class HotRoute:
    """``method`` on ``pattern`` (one path parameter, matched as Starlette's ``{name}``
    is: no slash) is answered by ``endpoint``; ``template`` names the FastAPI route that
    documents it (and labels its metrics)."""

    method: str
    template: str
    endpoint: Endpoint

    @property
    def pattern(self) -> re.Pattern[str]:
        head, _, tail = self.template.partition("{")
        _, _, rest = tail.partition("}")
        return re.compile(f"^{re.escape(head)}([^/]+){re.escape(rest)}$")


class Hot:
    """ASGI middleware answering ``routes`` directly; the rest goes on to ``app``."""

    def __init__(
        self, app: ASGIApp, owner: FastAPI, tables: tuple[tuple[APIRouter, Routes], ...]
    ) -> None:
        self.app = app
        self._owner = owner
        self._table = [(r.method, r.pattern, r.endpoint, _declared(router, r))
                       for router, routes in tables for r in routes]  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            for method, pattern, endpoint, route in self._table:
                if scope["method"] == method and (found := pattern.match(path)) is not None:
                    scope["route"] = route  # as the router leaves it, for the metrics
                    await self._answer(scope, receive, send, endpoint, found.group(1))
                    return
        await self.app(scope, receive, send)

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint, param: str
    ) -> None:
        request = Request(scope, receive)
        try:
            response = await endpoint(request, param)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            answer = handler(request, exc)
            response = await answer if inspect.isawaitable(answer) else answer
        if response is None:
            response = Response(status_code=204)
        await response(scope, receive, send)

    def _handler(self, exc: Exception) -> _Handler | None:
        # Starlette's exception middleware looks a handler up by the error's classes; an
        # HTTP request's handler takes a Request (problems.install's all do).
        handlers = self._owner.exception_handlers
        for kind in type(exc).__mro__:
            if kind in handlers:
                return cast(_Handler, handlers[kind])
        return None


def _declared(router: APIRouter, hot: HotRoute) -> APIRoute:
    for route in router.routes:
        methods = getattr(route, "methods", None) or ()
        if isinstance(route, APIRoute) and route.path == hot.template and hot.method in methods:
            return route
    raise LookupError(f"no route {hot.method} {hot.template} documents a hot route")


def install(app: FastAPI, *tables: tuple[APIRouter, Routes]) -> None:
    """Answer each table's routes, of its router (included in ``app``), directly."""
    app.add_middleware(Hot, owner=app, tables=tables)
