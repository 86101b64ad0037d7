"""How the console answers: HTML from its templates, and errors as HTML too (a problem
shown on the page, 401 as the login form), never the API's JSON problem documents."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, PackageLoader, select_autoescape

from sluice.errors import QueueNotFound, SluiceError
from sluice.server.auth import Gate
from sluice.server.console.access import presented, visitor
from sluice.server.problems import Problem, status_of

__all__ = ["LOGIN", "HtmlRoute", "OpenHtmlRoute", "render", "when"]

LOGIN = "/console/login"

_env = Environment(
    loader=PackageLoader("sluice.server.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["ago"] = lambda seconds: _duration(float(seconds))


def when(epoch: float | None) -> str:
    """A time (epoch seconds) as people read it, in the server's time zone."""
    return "" if epoch is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


_env.filters["when"] = when


def render(request: Request, template: str, code: int = 200, **values: Any) -> HTMLResponse:
    """The template with ``values``, and what every page needs: whether keys are asked."""
    gate: Gate = request.app.state.gate
    html = _env.get_template(template).render(
        request=request, auth=gate.keys is not None, path=request.url.path, **values
    )
    return HTMLResponse(html, status_code=code)


class HtmlRoute(APIRoute):
    """A console route: its errors are shown as HTML, in the page or in the part of it
    that asked (htmx), and a request without a (valid) key gets the login form.

    The key is checked first, before FastAPI reads the form or the query and before the
    request's origin is: a request without one is told 401, whatever else it holds."""

    keyed = True

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                if self.keyed:
                    await visitor(request)
                return await handler(request)
            except Problem as exc:
                return problem(request, exc.status, exc.detail)
            except QueueNotFound as exc:  # its own hint is the Python API's: none here
                return problem(request, 404, exc.describe(None))
            except SluiceError as exc:
                return problem(request, status_of(exc), str(exc))
            except RequestValidationError as exc:
                detail = "; ".join(
                    f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}"
                    for e in exc.errors()
                )
                return problem(request, 422, detail or "invalid request")

        return guarded


class OpenHtmlRoute(HtmlRoute):
    """A console route that needs no key: the login and logout forms."""

    keyed = False


def problem(request: Request, status: int, detail: str) -> Response:
    fragment = request.headers.get("hx-request") == "true"
    if status == 401:
        if fragment:  # htmx follows HX-Redirect: the whole page goes to the login form
            where = request.headers.get("hx-current-url", "/")
            return Response(status_code=401, headers=_login_redirect(where))
        here = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
        # A browser that has not logged in yet is shown the form, not an error.
        page = render(request, "login.html", 401, next=here if request.method == "GET" else "/",
                      error=detail if presented(request) else None)  # fmt: skip
        page.headers["WWW-Authenticate"] = 'Bearer realm="sluice"'
        return page
    shown = "problem_part.html" if fragment else "problem.html"
    return render(request, shown, status, status=status, detail=detail)


def _login_redirect(where: str) -> dict[str, str]:
    page = urlsplit(where)  # the page's own path: the login goes nowhere else
    back = page.path + (f"?{page.query}" if page.query else "")
    return {"HX-Redirect": f"{LOGIN}?next={quote(back or '/', safe='')}"}


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "0 s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"
