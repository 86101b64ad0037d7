"""Queue transactions across requests: begin one, enqueue and dequeue inside it over
several requests, then commit or abort it.

A transaction belongs to the key that began it (another key gets 404, as if it did
not exist). It ends by itself when it stays idle past its expiry: it is then aborted
as a dead session's transaction is (its enqueues never happen, what it dequeued goes
back). Every request on it moves the expiry on. One request at a time: a second
while one runs gets 409. A sluice transaction holds no database lock between
statements (its enqueues wait in memory until commit, its claims are rows), so on
SQLite too an open one keeps nobody from writing.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

import sluice
from sluice.clock import Clock
from sluice.errors import SluiceError, StorageError
from sluice.server.auth import KeyedRoute, caller, need
from sluice.server.grants import Principal
from sluice.server.models import Enqueue, Enqueued, MessageOut, Reject, Strict, enqueue_into
from sluice.server.problems import Problem
from sluice.server.reaper import Reaper

__all__ = ["Open", "Transactions", "router"]

log = logging.getLogger(__name__)

MAX_IDLE = 3600.0
"""The longest a transaction may stay idle, seconds."""


@dataclass(slots=True)
class Open:
    """An open transaction of the server's."""

    id: str
    owner: str
    tx: sluice.Transaction
    idle: float
    expires: float
    held: dict[str, sluice.Message] = field(default_factory=dict)
    """What it dequeued and holds, by message id."""
    busy: threading.Lock = field(default_factory=threading.Lock)


class Transactions:
    """The server's open transactions by id (see the module docstring)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._open: dict[str, Open] = {}
        self._changed = threading.Condition()
        self._reaper = Reaper("sluice-transactions", clock, self._changed, self._next,
                              self.expire)  # fmt: skip

    def __len__(self) -> int:
        with self._changed:
            return len(self._open)

    def begin(self, db: sluice.Database, owner: str, idle: float) -> Open:
        found = Open(secrets.token_urlsafe(18), owner, db.begin(), idle,
                     self._clock.now() + idle)  # fmt: skip
        with self._changed:
            self._open[found.id] = found
            self._changed.notify()
        return found

    @contextmanager
    def using(self, ref: str, owner: str) -> Iterator[Open]:
        """The open transaction ``ref`` of ``owner``, for one request; 404 if there is
        none (or it expired), 409 while another request uses it."""
        with self._changed:
            found = self._open.get(ref)
            if found is None or found.owner != owner or found.expires <= self._clock.now():
                raise Problem(
                    404,
                    f"no open transaction {ref!r}: it ended, expired (and was rolled back) "
                    "or is another key's",
                    error="TransactionNotFound",
                )
            if not found.busy.acquire(blocking=False):
                raise Problem(409, f"transaction {ref!r} is busy with another request",
                              error="TransactionBusy")  # fmt: skip
            found.expires = self._clock.now() + found.idle  # idle from now, and from the end
        try:
            yield found
        finally:
            with self._changed:
                found.expires = self._clock.now() + found.idle
                self._changed.notify()
            found.busy.release()

    def end(self, found: Open) -> None:
        """``found`` committed or aborted: forget it."""
        with self._changed:
            self._open.pop(found.id, None)

    def expire(self) -> int:
        """Abort every transaction idle past its expiry (not one a request is using)."""
        now = self._clock.now()
        with self._changed:
            ended = [t for t in self._open.values() if t.expires <= now and t.busy.acquire(False)]
            for t in ended:
                del self._open[t.id]
        for t in ended:
            self._abort(t)
        return len(ended)

    def close(self) -> None:
        """Stop the reaper and abort every open transaction."""
        self._reaper.stop()
        with self._changed:
            left = list(self._open.values())
            self._open.clear()
        for t in left:
            self._abort(t)

    @staticmethod
    def _abort(found: Open) -> None:
        try:
            found.tx.abort()
        except (SluiceError, StorageError) as exc:
            log.warning("transaction %s could not be rolled back: %s", found.id, exc)

    def _next(self) -> float | None:
        return min((t.expires for t in self._open.values()), default=None)


# --- routes ---------------------------------------------------------------------------
router = APIRouter(prefix="/api/transactions", tags=["transactions"], route_class=KeyedRoute)

Who = Annotated[Principal, Depends(caller)]


class Begin(Strict):
    idle: float = Field(60.0, gt=0, le=MAX_IDLE)
    """Seconds the transaction may stay without a request before it is rolled back."""


class TransactionOut(BaseModel):
    id: str
    expires_at: float
    holds: list[str]
    """The ids of the messages it dequeued and holds."""

    @classmethod
    def of(cls, found: Open) -> TransactionOut:
        return cls(id=found.id, expires_at=found.expires, holds=sorted(found.held))


class Dequeue(Strict):
    limit: int = Field(1, ge=1, le=100)
    wait: float = Field(0.0, ge=0, le=20.0)
    where: str | None = Field(None, max_length=10_000)
    order_by: list[str] | None = Field(None, max_length=16)


def _registry(request: Request) -> Transactions:
    found: Transactions = request.app.state.transactions
    return found


@router.post("", status_code=201, summary="Begin a transaction")
def begin(request: Request, who: Who, ask: Begin | None = None) -> TransactionOut:
    idle = (ask or Begin()).idle
    return TransactionOut.of(_registry(request).begin(request.app.state.db, who.name, idle))


@router.get("/{ref}", summary="An open transaction: its expiry and what it holds")
def get(request: Request, who: Who, ref: str) -> TransactionOut:
    with _registry(request).using(ref, who.name) as found:
        return TransactionOut.of(found)


@router.post(
    "/{ref}/queues/{name}/messages", status_code=201, summary="Enqueue at commit (produce)"
)
def enqueue(request: Request, who: Who, ref: str, name: str, batch: Enqueue) -> Enqueued:
    need(who, name, "produce")
    with _registry(request).using(ref, who.name) as found:
        return Enqueued(ids=enqueue_into(found.tx, name, batch))


@router.post("/{ref}/queues/{name}/dequeue", summary="Take messages, done at commit (consume)")
def dequeue(request: Request, who: Who, ref: str, name: str, ask: Dequeue) -> list[MessageOut]:
    need(who, name, "consume")
    with _registry(request).using(ref, who.name) as found:
        order_by = tuple(ask.order_by) if ask.order_by else None
        taken = found.tx.dequeue(name, limit=ask.limit, wait=ask.wait, where=ask.where,
                                 order_by=order_by)  # fmt: skip
        for m in taken:
            found.held[m.id] = m
        return [MessageOut.of(m) for m in taken]


def _held(found: Open, message: str) -> sluice.Message:
    m = found.held.get(message)
    if m is None:
        raise Problem(404, f"transaction {found.id} holds no message {message!r}",
                      error="MessageNotHeld")  # fmt: skip
    return m


@router.post("/{ref}/messages/{message:path}/release", status_code=204, summary="Give one back now")
def release(request: Request, who: Who, ref: str, message: str) -> None:
    with _registry(request).using(ref, who.name) as found:
        found.tx.release(_held(found, message))
        del found.held[message]


@router.post(
    "/{ref}/messages/{message:path}/reject",
    status_code=204,
    summary="Send one to the error queue at commit, with a reason",
)
def reject(request: Request, who: Who, ref: str, message: str, why: Reject) -> None:
    with _registry(request).using(ref, who.name) as found:
        found.tx.reject(_held(found, message), why.reason)


@router.post("/{ref}/commit", status_code=204, summary="Commit: all of it happens")
def commit(request: Request, who: Who, ref: str) -> None:
    registry = _registry(request)
    with registry.using(ref, who.name) as found:
        try:
            found.tx.commit()
        finally:  # committed, or failed and rolled back: over either way
            registry.end(found)


@router.post("/{ref}/abort", status_code=204, summary="Abort: none of it happens")
def abort(request: Request, who: Who, ref: str) -> None:
    registry = _registry(request)
    with registry.using(ref, who.name) as found:
        try:
            found.tx.abort()
        finally:
            registry.end(found)
