"""Who uses the console, and whether a request that changes something came from it.

A browser logs in with an API key, which the console keeps in an HttpOnly,
SameSite=Strict cookie; each request is then authenticated by it (or by an
``Authorization: Bearer`` header) against the same keys and grants as the API, so a
revoked key is refused at once. A request that changes something must come from the
console's own pages: ``Sec-Fetch-Site`` same-origin (or none: typed by the user), or
else an ``Origin`` that is this host, as Sidekiq checks.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from sluice.server.auth import ANONYMOUS, UNKNOWN_KEY, Gate
from sluice.server.grants import Principal
from sluice.server.problems import Problem

__all__ = ["COOKIE", "form", "presented", "same_origin", "visitor"]

COOKIE = "sluice_console"
"""The cookie holding the key a browser logged in with."""

_VISITOR = "sluice.visitor"
"""Where a request's scope keeps whom its key stands for, once checked."""

_MAX_FORM = 64 * 1024


async def visitor(request: Request) -> Principal:
    """The console's caller: by the Bearer header (as the API's), else the login cookie
    (401 if none or a key unknown or revoked). The cookie's key is read from the store
    at every request, never remembered: a person's few requests can afford it, and a
    revoked key then ends a browser's session at once. Checked once a request: by its
    route before anything else (pages.HtmlRoute), then read by its dependencies."""
    state = request.scope.setdefault("state", {})
    found = state.get(_VISITOR)
    if isinstance(found, Principal):
        return found
    found = await _check(request)
    state[_VISITOR] = found
    return found


async def _check(request: Request) -> Principal:
    gate: Gate = request.app.state.gate
    if gate.keys is None:
        return ANONYMOUS
    if request.headers.get("authorization"):
        return await gate.principal(request)
    secret = request.cookies.get(COOKIE)
    if not secret:
        raise Problem(401, "log in with an API key to use the console", error="Unauthorized")
    found = await run_in_threadpool(gate.keys.authenticate, secret)
    if found is None:
        raise Problem(401, f"{UNKNOWN_KEY}: log in again", error="Unauthorized")
    return found


def presented(request: Request) -> bool:
    """Whether the request came with a key (the cookie or the header), refused or not: a
    login form shown to a browser that has not logged in yet has no error to say."""
    return bool(request.cookies.get(COOKIE) or request.headers.get("authorization"))


def same_origin(request: Request) -> None:
    """403 unless the request comes from a page of this server (a cross-site form or
    script would otherwise act with the browser's cookie)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        if site in ("same-origin", "none"):
            return
        raise Problem(
            403,
            f"refused a cross-site request (Sec-Fetch-Site: {site}): "
            "the console's actions are taken from its own pages",
            error="CrossSiteRequest",
        )
    origin = request.headers.get("origin")
    if origin is not None:
        if urlsplit(origin).netloc == request.headers.get("host", ""):
            return
        raise Problem(
            403,
            f"refused a request from another origin ({origin}): "
            "the console's actions are taken from its own pages",
            error="CrossSiteRequest",
        )
    if request.headers.get("authorization"):
        return  # a program with its key: browsers never add this header by themselves
    raise Problem(
        403,
        "refused a request that does not say where it comes from (no Sec-Fetch-Site, "
        "no Origin): use a current browser, or send the key as Authorization: Bearer",
        error="CrossSiteRequest",
    )


async def form(request: Request) -> dict[str, str]:
    """The fields of an ``application/x-www-form-urlencoded`` body (the console's forms)."""
    body = await request.body()
    if len(body) > _MAX_FORM:
        raise Problem(413, f"a console form is at most {_MAX_FORM} bytes", error="PayloadTooLarge")
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
