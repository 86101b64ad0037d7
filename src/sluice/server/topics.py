"""Routes for topics and their subscriptions (docs/topics.md): create a topic,
subscribe with a selector, list subscriptions with their lag, unsubscribe.

A topic takes messages through the queue routes (enqueue into it by name), and a
subscription is consumed as a queue (lease, transaction dequeue, browse); these
routes make and list them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field

import sluice
from sluice.catalog import Durability
from sluice.engine.topics import Subscription
from sluice.server.auth import KeyedRoute, caller, need
from sluice.server.grants import Principal
from sluice.server.models import QueueOut, Strict

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["topics"], route_class=KeyedRoute)

Who = Annotated[Principal, Depends(caller)]


class TopicIn(Strict):
    name: str = Field(min_length=1, max_length=200)
    durability: Durability = "persistent"
    max_size: int | None = Field(None, ge=1)
    types: list[str] = Field(default_factory=list)
    priority_levels: int | None = Field(None, ge=1, le=10)
    retention: float | None = Field(None, ge=0)
    exist_ok: bool = False


class SubscriptionIn(Strict):
    """A subscription of the topic: ``where`` selects its messages (docs/expressions.md);
    ``start``: ``new`` (from now on), ``first`` (every message the topic still keeps) or a
    message's position; not ``durable``: it ends when this server's process does."""

    name: str = Field(min_length=1, max_length=200)
    where: str | None = Field(None, max_length=10_000)
    start: Literal["new", "first"] | str = "new"
    durable: bool = True
    expire_after: float | None = Field(None, gt=0)
    max_attempts: int | None = Field(None, ge=1)
    error_queue: str | None = Field(None, min_length=1, max_length=200)
    max_in_flight: int | None = Field(None, ge=1)
    exist_ok: bool = False


class SubscriptionOut(BaseModel):
    name: str
    topic: str
    where: str | None
    durable: bool
    expire_after: float | None
    held: int
    backlog: int
    lag: int
    oldest_enqueued_at: float | None
    last_used_at: float | None

    @classmethod
    def of(cls, s: Subscription) -> SubscriptionOut:
        return cls(name=s.name, topic=s.topic, where=s.where, durable=s.durable,
                   expire_after=s.expire_after, held=s.held, backlog=s.backlog, lag=s.lag,
                   oldest_enqueued_at=s.oldest, last_used_at=s.last_used)  # fmt: skip


def _db(request: Request) -> sluice.Database:
    db: sluice.Database = request.app.state.db
    return db


@router.post("/topics", status_code=201, summary="Create a topic (manage)")
def create_topic(request: Request, who: Who, new: TopicIn) -> QueueOut:
    need(who, new.name, "manage")
    options: dict[str, Any] = new.model_dump(exclude={"name", "exist_ok"}, exclude_none=True)
    options["types"] = tuple(new.types)
    topic = _db(request).create_topic(new.name, exist_ok=new.exist_ok, **options)
    return QueueOut.of(topic.spec, topic.stats())


@router.get("/topics/{topic}/subscriptions", summary="A topic's subscriptions and their lag")
def subscriptions(request: Request, who: Who, topic: str) -> list[SubscriptionOut]:
    need(who, topic, "browse")
    return [SubscriptionOut.of(s) for s in _db(request).subscriptions(topic)]


@router.post(
    "/topics/{topic}/subscriptions",
    status_code=201,
    summary="Subscribe (consume on the topic, manage on the subscription's name)",
)
def subscribe(request: Request, who: Who, topic: str, new: SubscriptionIn) -> SubscriptionOut:
    need(who, topic, "consume")
    need(who, new.name, "manage")
    if new.error_queue is not None:
        need(who, new.error_queue, "manage")  # it may be made too, as a queue's at create
    db = _db(request)
    db.subscribe(topic, new.name, **new.model_dump(exclude={"name"}, exclude_none=True))
    (made,) = [s for s in db.subscriptions(topic) if s.name == new.name]
    return SubscriptionOut.of(made)


@router.delete(
    "/subscriptions/{name}",
    status_code=204,
    summary="Unsubscribe: the subscription and its unsettled messages go (manage)",
)
def unsubscribe(request: Request, who: Who, name: str) -> Response:
    need(who, name, "manage")
    _db(request).unsubscribe(name)
    return Response(status_code=204)
