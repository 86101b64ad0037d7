"""Errors as problem documents (RFC 9457): every error the server answers is
``application/problem+json`` with the sluice error's name, never an HTML page or a
bare 500."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from sluice.errors import (
    ConfigurationError,
    Conflict,
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

__all__ = ["PROBLEM", "Problem", "install", "problem_body", "problem_response", "status_of"]

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
    409: "Conflict",
    410: "Gone",
    413: "Content too large",
    422: "Unprocessable content",
    500: "Internal server error",
    503: "Service unavailable",
}


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
    status: int, detail: str, *, error: str | None = None, **extra: Any
) -> JSONResponse:
    """``problem_body`` as a response."""
    body = problem_body(status, detail, error=error, **extra)
    headers = {"WWW-Authenticate": 'Bearer realm="sluice"'} if status == 401 else None
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def status_of(exc: SluiceError) -> int:
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 400


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` with a problem document."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(exc.status, exc.detail, error=exc.error)

    async def on_sluice(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, SluiceError)
        return problem_response(status_of(exc), str(exc), error=type(exc).__name__)

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
        return problem_response(exc.status_code, str(exc.detail))

    async def on_other(request: Request, exc: Exception) -> JSONResponse:
        # A bug of the server's: logged with its traceback, answered without it.
        log.exception("error while answering %s %s", request.method, request.url.path)
        return problem_response(500, f"internal error: {type(exc).__name__}")

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(SluiceError, on_sluice)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_other)
