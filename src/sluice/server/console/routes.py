"""The console's pages, the parts of them that refresh themselves, and its actions.

Pages: ``/`` (queues and topics, subscriptions, jobs, profiles, rules) and
``/console/queues/{name}`` (charts and the message browser). Parts that htmx polls:
``/console/overview`` and ``/console/queues/{name}/live``; the browser's list is
``/console/queues/{name}/messages``. Actions (POST, same-origin only): retry and
discard failed messages, one or all a selector matches; log in and out.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

import sluice
from sluice.errors import ExpressionError
from sluice.server.auth import Gate, need
from sluice.server.console.access import COOKIE, form, same_origin, visitor
from sluice.server.console.pages import HtmlRoute, OpenHtmlRoute, render
from sluice.server.console.samples import Sampler
from sluice.server.console.views import (
    admin_view,
    error_rows,
    queue_charts,
    queue_rows,
    shown_body,
    shown_properties,
    subscription_rows,
)
from sluice.server.grants import Principal
from sluice.server.problems import Problem

__all__ = ["EXAMPLE", "PAGE", "VIEWS", "public", "router"]

router = APIRouter(route_class=HtmlRoute, include_in_schema=False)
public = APIRouter(route_class=OpenHtmlRoute, include_in_schema=False)
"""The routes that need no key: logging in and out."""

Who = Annotated[Principal, Depends(visitor)]
Form = Annotated[dict[str, str], Depends(form)]
Changes = Depends(same_origin)

PAGE = 50
"""Messages per page of the browser."""

EXAMPLE = "body.total > 100 AND props.region = 'EU'"
"""The selector the browser's empty box shows: one that runs (tests run it)."""

VIEWS = ("queues", "subscriptions", "jobs", "errors", "rules")
"""The dashboard's parts, each a page of the console's navigation (``/?view=jobs``)."""

View = Annotated[str | None, Query(max_length=20)]

_STATES = ("ready", "delayed", "claimed", "failed", "expired", "done")


def _db(request: Request) -> sluice.Database:
    db: sluice.Database = request.app.state.db
    return db


def _sampler(request: Request) -> Sampler:
    sampler: Sampler = request.app.state.console_sampler
    return sampler


# --- logging in ---------------------------------------------------------------------
@public.get("/console/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "/") -> Response:
    gate: Gate = request.app.state.gate
    if gate.keys is None:
        return RedirectResponse(_local(next), status_code=303)
    return render(request, "login.html", next=_local(next), error=None)


@public.post("/console/login", dependencies=[Changes])
def log_in(request: Request, fields: Form) -> Response:
    gate: Gate = request.app.state.gate
    target = _local(fields.get("next", "/"))
    if gate.keys is None:
        return RedirectResponse(target, status_code=303)
    secret = fields.get("key", "").strip()
    if not secret or gate.keys.authenticate(secret) is None:
        return render(request, "login.html", 401, next=target, error=_REFUSED)
    answer = RedirectResponse(target, status_code=303)
    answer.set_cookie(COOKIE, secret, httponly=True, samesite="strict", path="/",
                      secure=request.url.scheme == "https")  # fmt: skip
    return answer


@public.post("/console/logout", dependencies=[Changes])
def log_out(request: Request) -> Response:
    answer = RedirectResponse("/console/login", status_code=303)
    answer.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return answer


_REFUSED = (
    "That key is unknown or revoked. Keys belong to one database: make one with "
    "`sluice keys add NAME --db URL` for the database this server serves."
)


def _local(target: str) -> str:
    """Only a path of this server to go to after logging in (no open redirect)."""
    parts = urlsplit(target)
    path = parts.path if parts.path.startswith("/") and not parts.path.startswith("//") else "/"
    return path + (f"?{parts.query}" if parts.query else "")


# --- the dashboard ------------------------------------------------------------------
@router.get("/", response_class=HTMLResponse)
def dashboard(request: Request, who: Who, view: View = None) -> Response:
    return render(request, "dashboard.html", who=who, **_overview(request, who, view))


@router.get("/console/overview", response_class=HTMLResponse)
def overview(request: Request, who: Who, view: View = None) -> Response:
    return render(request, "overview.html", who=who, **_overview(request, who, view))


def _overview(request: Request, who: Principal, view: str | None) -> dict[str, Any]:
    """Every part of the dashboard (``view`` None), or the one named."""
    view = view or None
    if view is not None and view not in VIEWS:
        raise Problem(422, f"view must be one of {', '.join(VIEWS)}, not {view!r}")
    db = _db(request)
    queues = queue_rows(db, who, _sampler(request).samples())
    return {
        "view": view,
        "queues": queues,
        "errors": error_rows(queues),
        "subscriptions": subscription_rows(db, who),
        **admin_view(db, who),
    }


# --- a queue ------------------------------------------------------------------------
@router.get("/console/queues/{name}", response_class=HTMLResponse)
def queue_page(
    request: Request,
    who: Who,
    name: str,
    *,
    state: Annotated[str, Query()] = "ready",
    where: Annotated[str, Query(max_length=10_000)] = "",
    after: Annotated[str, Query(max_length=100)] = "",
) -> Response:
    need(who, name, "browse")
    db = _db(request)
    spec = db.queue(name).spec
    return render(request, "queue.html", who=who, spec=spec, live=_live(request, who, name),
                  **_browse(request, who, name, state=state, where=where, after=after))  # fmt: skip


@router.get("/console/queues/{name}/live", response_class=HTMLResponse)
def queue_live(request: Request, who: Who, name: str) -> Response:
    need(who, name, "browse")
    return render(request, "queue_live.html", **_live(request, who, name))


@router.get("/console/queues/{name}/messages", response_class=HTMLResponse)
def queue_messages(
    request: Request,
    who: Who,
    name: str,
    *,
    state: Annotated[str, Query()] = "ready",
    where: Annotated[str, Query(max_length=10_000)] = "",
    after: Annotated[str, Query(max_length=100)] = "",
) -> Response:
    need(who, name, "browse")
    return render(
        request,
        "messages.html",
        **_browse(request, who, name, state=state, where=where, after=after),
    )


def _live(request: Request, who: Principal, name: str) -> dict[str, Any]:
    queue = _db(request).queue(name)
    stats = queue.stats()
    return {
        "name": name,
        "stats": stats,
        "paused": queue.paused,
        "manage": who.allows(name, "manage"),
        "charts": queue_charts(_sampler(request).samples(), name),
    }


@router.post("/console/queues/{name}/pause", response_class=HTMLResponse, dependencies=[Changes])
def pause(request: Request, who: Who, name: str, fields: Form) -> Response:
    need(who, name, "manage")
    _db(request).queue(name).pause()
    return _after_switch(request, who, name, fields)


@router.post("/console/queues/{name}/resume", response_class=HTMLResponse, dependencies=[Changes])
def resume(request: Request, who: Who, name: str, fields: Form) -> Response:
    need(who, name, "manage")
    _db(request).queue(name).resume()
    return _after_switch(request, who, name, fields)


def _after_switch(request: Request, who: Principal, name: str, fields: dict[str, str]) -> Response:
    """The part of the page the button was in, redrawn: the dashboard's or the queue's."""
    if fields.get("from") == "overview":
        view = _overview(request, who, fields.get("view"))
        return render(request, "overview.html", who=who, **view)
    return render(request, "queue_live.html", **_live(request, who, name))


def _browse(
    request: Request,
    who: Principal,
    name: str,
    *,
    state: str,
    where: str,
    after: str,
    notice: str | None = None,
) -> dict[str, Any]:
    if state not in _STATES:
        raise Problem(422, f"state must be one of {', '.join(_STATES)}, not {state!r}")
    queue = _db(request).queue(name)
    error = None
    try:
        found = queue.browse(PAGE + 1, state=state, where=where.strip() or None,  # type: ignore[arg-type]
                             after=after or None)  # fmt: skip
    except ExpressionError as exc:  # a selector the user typed: said in the page
        found, error = [], _bad_selector(exc)
    more = len(found) > PAGE
    found = found[:PAGE]
    return {
        "name": name,
        "state": state,
        "where": where,
        "after": after,
        "states": _STATES,
        "messages": [(m, shown_body(m), shown_properties(m)) for m in found],
        "example": EXAMPLE,
        "failed_shown": any(m.origin_queue for m in found),
        "next": str(found[-1].position) if more and state != "done" else None,
        "error": error,
        "notice": notice,
        "can_retry": who.allows(name, "consume") and state in ("ready", "delayed", "failed"),
    }


@router.post("/console/queues/{name}/retry", response_class=HTMLResponse, dependencies=[Changes])
def retry(request: Request, who: Who, name: str, fields: Form) -> Response:
    need(who, name, "consume")
    where, at = _target(fields)
    queue = _db(request).queue(name)
    try:
        done = queue.retry(where=where, at=at, allowed=lambda src: who.allows(src, "produce"))
    except ExpressionError as exc:
        return _after_action(request, who, name, fields, error=_bad_selector(exc))
    return _after_action(request, who, name, fields, _moved(done.moved, done.left, who))


@router.post("/console/queues/{name}/discard", response_class=HTMLResponse, dependencies=[Changes])
def discard(request: Request, who: Who, name: str, fields: Form) -> Response:
    need(who, name, "consume")
    where, at = _target(fields)
    try:
        gone = _db(request).queue(name).discard(where=where, at=at)
    except ExpressionError as exc:
        return _after_action(request, who, name, fields, error=_bad_selector(exc))
    return _after_action(request, who, name, fields, f"Discarded {_count(gone)}.")


def _target(fields: dict[str, str]) -> tuple[str | None, str | None]:
    """One message (``at``, its position) or all the selector matches (``where``; all
    failed messages if it is empty)."""
    at = fields.get("at") or None
    if at is not None:
        return None, at
    if fields.get("all") != "yes":
        raise Problem(422, "say which: one message (at) or all that match (all=yes)")
    return fields.get("where", "").strip() or None, None


def _after_action(
    request: Request,
    who: Principal,
    name: str,
    fields: dict[str, str],
    notice: str | None = None,
    *,
    error: str | None = None,
) -> Response:
    # Back to the first page: what was on this one has changed.
    values = _browse(request, who, name, state=fields.get("state", "ready"),
                     where=fields.get("where", ""), after="", notice=notice)  # fmt: skip
    if error is not None:
        values["error"] = error
    return render(request, "messages.html", **values)


def _bad_selector(exc: ExpressionError) -> str:
    return f"The selector is not valid: {exc}"


def _moved(moved: dict[str, int], left: dict[str, int], who: Principal) -> str:
    said = [f"Retried {_count(sum(moved.values()))}"]
    if moved:
        said[0] += " back to " + ", ".join(sorted(moved))
    for source, n in sorted(left.items()):
        why = "no produce grant" if not who.allows(source, "produce") else "it no longer exists"
        said.append(f"left {_count(n)} of {source} ({why})")
    return "; ".join(said) + "."


def _count(n: int) -> str:
    return f"{n} message" + ("" if n == 1 else "s")
