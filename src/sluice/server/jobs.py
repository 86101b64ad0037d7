"""Routes for jobs (docs/jobs.md): submit a job of tasks, and follow its progress.

Submitting needs ``produce`` on the queue of every task type the job uses (workers
take the tasks from there); reading jobs, which span task types, needs an admin key.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import Field

import sluice
from sluice.jobs import TaskSpec
from sluice.server.auth import KeyedRoute, caller, need, need_admin
from sluice.server.grants import Principal
from sluice.server.models import JsonValue, Strict

__all__ = ["router"]

router = APIRouter(prefix="/api/jobs", tags=["jobs"], route_class=KeyedRoute)

Who = Annotated[Principal, Depends(caller)]


class TaskIn(Strict):
    type: str = Field(min_length=1, max_length=200)
    body: JsonValue = None
    priority: int | None = None


class JobIn(Strict):
    name: str = Field(min_length=1, max_length=200)
    tasks: list[TaskIn] = Field(min_length=1, max_length=10_000)
    priority: int = 0
    deadline: float | None = None
    """Epoch seconds."""
    info: JsonValue = None
    alert_queue: str | None = Field(None, min_length=1, max_length=200)


def _db(request: Request) -> sluice.Database:
    db: sluice.Database = request.app.state.db
    return db


@router.post("", status_code=201, summary="Submit a job (produce on its task types' queues)")
def submit(request: Request, who: Who, job: JobIn) -> dict[str, Any]:
    db = _db(request)
    for kind in sorted({t.type for t in job.tasks}):
        need(who, db.jobs.types.get(kind).queue, "produce")
    if job.alert_queue is not None:
        need(who, job.alert_queue, "produce")
    specs = [TaskSpec(t.type, t.body, t.priority) for t in job.tasks]
    made = db.jobs.submit(job.name, specs, priority=job.priority, deadline=job.deadline,
                          info=job.info, alert_queue=job.alert_queue, owner=who.name)  # fmt: skip
    return db.jobs.get(made).as_dict()


@router.get("", summary="Jobs, newest first, with their progress (admin)")
def jobs(
    request: Request,
    who: Who,
    open_only: Annotated[bool, Query()] = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    need_admin(who)
    return [j.as_dict() for j in _db(request).jobs.list(open_only=open_only, limit=limit)]


@router.get("/{job:path}", summary="A job's progress (admin)")
def job(request: Request, who: Who, job: str) -> dict[str, Any]:
    need_admin(who)
    return _db(request).jobs.get(job).as_dict()
