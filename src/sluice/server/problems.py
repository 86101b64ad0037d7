"""Errors as problem documents (RFC 9457): every error the server answers is
``application/problem+json`` with the sluice error's name, never an HTML page or a
bare 500."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException
from starlette.routing import Match

from sluice.errors import (
    ConfigurationError,
    Conflict,
    ExpressionError,
    JobNotFound,
    KeyNotFound,
    MessageError,
    MessageStateError,
    PayloadTooLarge,
    QueueExists,
    QueueInUse,
    QueueNotFound,
    SluiceError,
    StorageError,
    TransactionError,
    UnknownTaskType,
)

__all__ = [
    "PROBLEM",
    "RESPONSES",
    "Problem",
    "ProblemDocument",
    "detail_of",
    "install",
    "problem_body",
    "problem_response",
    "status_of",
]

log = logging.getLogger(__name__)

PROBLEM = "application/problem+json"

_STATUS: tuple[tuple[type[SluiceError], int], ...] = (
    # The first that matches: subclasses before their parents.
    (QueueNotFound, 404),
    (JobNotFound, 404),
    (KeyNotFound, 404),
    (UnknownTaskType, 422),
    (QueueExists, 409),
    (QueueInUse, 409),
    (Conflict, 409),
    (MessageStateError, 409),
    (PayloadTooLarge, 413),
    (MessageError, 422),
    (ConfigurationError, 422),
    (TransactionError, 409),
    (StorageError, 503),
)

_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    408: "Request timeout",
    409: "Conflict",
    410: "Gone",
    413: "Content too large",
    422: "Unprocessable content",
    500: "Internal server error",
    503: "Service unavailable",
}


class Invalid(BaseModel):
    """One reason a request is invalid: where in it (``body.messages.0.delay``), and what."""

    where: str
    what: str


class ProblemDocument(BaseModel):
    """An error answer (RFC 9457): ``error`` names the sluice error; ``errors`` lists what
    is invalid in a request (422)."""

    model_config = ConfigDict(extra="allow")  # RFC 9457 extension members

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    error: str | None = None
    errors: list[Invalid] | None = None
    # An ExpressionError's: where the expression is wrong and what was expected there.
    expression: str | None = None
    reason: str | None = None
    position: int | None = None
    line: int | None = None
    column: int | None = None
    expected: list[str] | None = None


RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ProblemDocument, "description": "The request was refused"},
    503: {"model": ProblemDocument, "description": "The database is unavailable: retry"},
}
"""The error answers every route may give (``FastAPI(responses=...)``); ``install`` makes
their media type ``application/problem+json`` in the OpenAPI document."""


class Problem(Exception):
    """An answer that is a problem document: ``raise Problem(403, "...")`` in a route."""

    def __init__(self, status: int, detail: str, *, error: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.error = error


def problem_body(
    status: int, detail: str, *, error: str | None = None, **extra: Any
) -> dict[str, Any]:
    """The problem document for ``status``: type, title, status, detail and, where a
    sluice error caused it, its name as ``error``."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if error is not None:
        body["error"] = error
    body.update(extra)
    return body


def problem_response(
    status: int,
    detail: str,
    *,
    error: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """``problem_body`` as a response, with ``headers`` (a 405's ``Allow``)."""
    body = problem_body(status, detail, error=error, **extra)
    sent = dict(headers or {})
    if status == 401:
        sent["WWW-Authenticate"] = 'Bearer realm="sluice"'
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=sent)


_CREATE = {
    "queue": 'create it with POST /api/queues {{"name": {name}}}',
    "topic": 'create it with POST /api/topics {{"name": {name}}}',
    "subscription": 'subscribe with POST /api/topics/{{topic}}/subscriptions {{"name": {name}}}',
}
"""How a client of this server makes what was not found (the Python API's way, which
the error says by itself, means nothing over HTTP)."""


def detail_of(exc: SluiceError) -> str:
    """What an answer says of ``exc``: its message, in the words of this HTTP API."""
    if isinstance(exc, QueueNotFound) and exc.name is not None:
        create = _CREATE.get(exc.kind, _CREATE["queue"])
        return exc.describe(create.format(name=json.dumps(exc.name, ensure_ascii=False)))
    return str(exc)


def fields_of(exc: SluiceError) -> dict[str, Any]:
    """The problem's own fields for ``exc``: where an expression is wrong and what was
    expected there, so that a client can point at it without parsing ``detail``."""
    if not isinstance(exc, ExpressionError) or exc.expression is None:
        return {}
    found = {"expression": exc.expression, "reason": exc.reason, "position": exc.position,
             "line": exc.line, "column": exc.column, "expected": list(exc.expected)}  # fmt: skip
    return {k: v for k, v in found.items() if v is not None}


def status_of(exc: SluiceError) -> int:
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 400


def query_names(dependant: Dependant) -> frozenset[str]:
    """The query parameters a route takes, its dependencies' included."""
    names: set[str] = set()
    todo = [dependant]
    while todo:
        found = todo.pop()
        names.update(field.alias for field in found.query_params)
        todo.extend(found.dependencies)
    return frozenset(names)


def check_query(request: Request, takes: frozenset[str]) -> None:
    """422 for a query parameter the route does not take: a misspelt one (``?limt=5``)
    would otherwise be ignored, and the answer look like the one asked for."""
    unknown = sorted({name for name in request.query_params if name not in takes})
    if unknown:
        what = (
            f"not a parameter of this operation, which takes {', '.join(sorted(takes))}"
            if takes
            else "this operation takes no query parameters"
        )
        raise RequestValidationError(
            [{"loc": ("query", name), "msg": what, "type": "extra_forbidden"} for name in unknown]
        )


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` with a problem document."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(exc.status, exc.detail, error=exc.error)

    async def on_sluice(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SluiceError)
        return problem_response(
            status_of(exc), detail_of(exc), error=type(exc).__name__, **fields_of(exc)
        )

    async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [
            {"where": ".".join(str(p) for p in e.get("loc", ())), "what": e.get("msg", "")}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{e['where']}: {e['what']}" for e in errors) or "invalid request"
        return problem_response(422, detail, error="InvalidRequest", errors=errors)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Starlette's Allow names one route's methods, not the path's
            headers["Allow"] = ", ".join(_allowed(request))
        return problem_response(exc.status_code, str(exc.detail), error=_named(exc.status_code),
                                headers=headers)  # fmt: skip

    async def on_other(request: Request, exc: Exception) -> JSONResponse:
        # A bug of the server's: logged with its traceback, answered without it.
        log.exception("error while answering %s %s", request.method, request.url.path)
        return problem_response(500, f"internal error: {type(exc).__name__}")

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(SluiceError, on_sluice)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_other)
    _document(app)


def _named(status: int) -> str:
    """An error's name from its status (``MethodNotAllowed``), where no sluice error
    caused it (a path no route has, a body that is not JSON)."""
    try:
        return HTTPStatus(status).phrase.title().replace(" ", "").replace("-", "")
    except ValueError:
        return "HTTPError"


def _allowed(request: Request) -> list[str]:
    """Every method some route of the app answers on the request's path."""
    return [
        method
        for method in ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.routes
        )
    ]


_SCHEMA = f"#/components/schemas/{ProblemDocument.__name__}"


def _document(app: FastAPI) -> None:
    """Error answers in ``app``'s OpenAPI document as they are sent: problem documents,
    ``application/problem+json`` (FastAPI would say ``application/json``)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        doc = generate()  # cached by FastAPI until routes change
        for operation in (op for ops in doc.get("paths", {}).values() for op in ops.values()):
            for status, answer in operation.get("responses", {}).items():
                if status in ("4XX", "503") and PROBLEM not in answer.get("content", {}):
                    # FastAPI gives them the route's own media type (a text route's too).
                    answer["content"] = {PROBLEM: {"schema": {"$ref": _SCHEMA}}}
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
