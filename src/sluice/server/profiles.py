"""Routes for profiles (docs/jobs.md, "Profiles"): a task type's throughput limits by
time of week, read and set over HTTP, each with what is in force now against the starts
all workers took. Task types span queues, so these routes need an admin key.

An entry reads as ``Entry.parse`` takes it: days such as ``"mon-fri"`` and a window
such as ``"08:00-18:00"``; a profile read back is written the same way, so it can be
sent again as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import Field

import sluice
from sluice.errors import UnknownTaskType
from sluice.jobs.limits import Gate
from sluice.jobs.model import TaskType, TaskTypeRow
from sluice.jobs.profiles import DAY_NAMES, Entry, Follow, Profile, cycle_start, hour_start
from sluice.server.auth import KeyedRoute, caller, need_admin
from sluice.server.grants import Principal
from sluice.server.models import Strict
from sluice.server.problems import Problem

__all__ = ["ProfileIn", "Usage", "router", "usage"]

router = APIRouter(prefix="/api/profiles", tags=["profiles"], route_class=KeyedRoute)

Who = Annotated[Principal, Depends(caller)]


class FollowIn(Strict):
    signal: str = Field(min_length=1, max_length=200)
    capacity: float = Field(gt=0)
    min_per_hour: int = Field(0, ge=0)


class EntryIn(Strict):
    days: str = Field(min_length=1, max_length=100, examples=["mon-fri"])
    window: str = Field(min_length=1, max_length=20, examples=["08:00-18:00"])
    tz: str = Field("UTC", min_length=1, max_length=100)
    max_per_hour: int | None = Field(None, ge=0)
    max_per_cycle: int | None = Field(None, ge=0)
    priority: int | None = Field(None, ge=-(2**31), le=2**31 - 1)
    follow: FollowIn | None = None


class ProfileIn(Strict):
    """A profile as ``sluice.jobs.profiles.Profile`` holds it, entries as text."""

    entries: list[EntryIn] = Field(default_factory=list, max_length=1000)
    default_per_hour: int | None = Field(None, ge=0)
    default_per_cycle: int | None = Field(None, ge=0)
    tz: str = Field("UTC", min_length=1, max_length=100)
    cycle: float = Field(60.0, gt=0, le=7 * 24 * 3600)

    def profile(self, task_type: str) -> Profile:
        entries = tuple(
            Entry.parse(e.days, e.window, tz=e.tz, max_per_hour=e.max_per_hour,
                        max_per_cycle=e.max_per_cycle, priority=e.priority,
                        follow=None if e.follow is None else Follow(**e.follow.model_dump()))
            for e in self.entries
        )  # fmt: skip
        return Profile(task_type, entries, self.default_per_hour, self.default_per_cycle,
                       self.tz, self.cycle)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Usage:
    """One window of a profiled task type now: its cap (None: none) and the starts taken
    in it since ``since`` (epoch seconds), by all workers; ``queue`` holds its tasks."""

    task_type: str
    queue: str
    window: str  # "hour" or "cycle"
    since: float
    limit: int | None
    starts: int


def usage(db: sluice.Database, now: float) -> list[Usage]:
    """Every profiled task type's windows at ``now`` (also read by ``/metrics`` and the
    console)."""
    gate = Gate(db, {})  # no signal functions: a following entry uses reported loads
    found = []
    for task_type in _task_types(db):
        profile, limits = gate.profile(task_type), gate.limits(task_type, now)
        if profile is None or limits is None:
            continue
        windows = {
            "hour": (hour_start(now, limits.tz), limits.max_per_hour),
            "cycle": (cycle_start(now, profile.cycle), limits.max_per_cycle),
        }
        first = min(start for start, _ in windows.values())
        used = {(kind, start): n for kind, start, n in db.jobs.usage(task_type.name, first)}
        for kind, (start, cap) in windows.items():
            n = used.get((kind, start), 0)
            found.append(Usage(task_type.name, task_type.queue, kind, start, cap, n))
    return found


def _task_types(db: sluice.Database) -> list[TaskType]:
    rows = db.backend.jobs_read("task_types", {})
    return [TaskType.from_row(row) for row in map(TaskTypeRow._make, rows)]


def _db(request: Request) -> sluice.Database:
    db: sluice.Database = request.app.state.db
    return db


def _as_json(profile: Profile, now: list[Usage]) -> dict[str, Any]:
    return {
        "task_type": profile.task_type,
        "entries": [_entry_json(e) for e in profile.entries],
        "default_per_hour": profile.default_per_hour,
        "default_per_cycle": profile.default_per_cycle,
        "tz": profile.tz,
        "cycle": profile.cycle,
        "now": {u.window: {"since": u.since, "limit": u.limit, "starts": u.starts} for u in now},
    }


def _entry_json(entry: Entry) -> dict[str, Any]:
    end = "24:00" if entry.end.hour == entry.end.minute == 0 else entry.end.strftime("%H:%M")
    follow = entry.follow
    return {
        "days": ",".join(DAY_NAMES[d] for d in sorted(entry.days)),
        "window": f"{entry.start.strftime('%H:%M')}-{end}",
        "tz": entry.tz,
        "max_per_hour": entry.max_per_hour,
        "max_per_cycle": entry.max_per_cycle,
        "priority": entry.priority,
        "follow": None if follow is None else {
            "signal": follow.signal, "capacity": follow.capacity,
            "min_per_hour": follow.min_per_hour},
    }  # fmt: skip


def _profiled(db: sluice.Database, task_type: str) -> Profile:
    try:
        profile = db.jobs.profile(task_type)
    except UnknownTaskType as exc:
        raise Problem(404, str(exc), error="UnknownTaskType") from None
    if profile is None:
        raise Problem(404, f"the task type {task_type!r} has no profile", error="NoProfile")
    return profile


@router.get("", summary="Every task type's profile with its limits and starts now (admin)")
def profiles(request: Request, who: Who) -> list[dict[str, Any]]:
    need_admin(who)
    db = _db(request)
    now = usage(db, db.clock.now())
    found = []
    for task_type in _task_types(db):
        profile = db.jobs.profile(task_type.name)
        if profile is not None:
            found.append(_as_json(profile, [u for u in now if u.task_type == task_type.name]))
    return found


@router.get("/{task_type}", summary="A task type's profile, its limits and starts now (admin)")
def profile(request: Request, who: Who, task_type: str) -> dict[str, Any]:
    need_admin(who)
    db = _db(request)
    found = _profiled(db, task_type)
    return _as_json(found, [u for u in usage(db, db.clock.now()) if u.task_type == task_type])


@router.put("/{task_type}", summary="Set a task type's profile (admin)")
def set_profile(request: Request, who: Who, task_type: str, given: ProfileIn) -> dict[str, Any]:
    need_admin(who)
    db = _db(request)
    db.jobs.set_profile(given.profile(task_type))  # UnknownTaskType, ConfigurationError: 422
    return profile(request, who, task_type)


@router.delete("/{task_type}", status_code=204, summary="Remove a task type's profile (admin)")
def clear_profile(request: Request, who: Who, task_type: str) -> Response:
    need_admin(who)
    db = _db(request)
    _profiled(db, task_type)
    db.jobs.clear_profile(task_type)
    return Response(status_code=204)
