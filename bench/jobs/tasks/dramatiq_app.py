"""The Dramatiq broker and actor of the peer benchmark, on Redis.

Workers start it with ``dramatiq bench.jobs.tasks.dramatiq_app``, which uses the broker
this module sets as the global one; the parent declares the actor on a broker of its own with
:func:`make_broker` and :func:`declare`.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.jobs.tasks import QUEUE, REDIS_URL_ENV

NAMESPACE = "sluice-bench-dramatiq"
ACTOR = "noop"


def noop() -> None:
    """The benchmark's task: it does nothing."""


def make_broker(url: str) -> RedisBroker:
    """A Redis broker with Dramatiq's default middleware, its keys under ``NAMESPACE``."""
    return RedisBroker(url=url, namespace=NAMESPACE)  # type: ignore[no-untyped-call, unused-ignore]


def declare(broker: RedisBroker) -> dramatiq.Actor[[], None]:
    """The no-op actor on ``broker``, with Dramatiq's default options."""
    return dramatiq.actor(actor_name=ACTOR, queue_name=QUEUE, broker=broker)(noop)


broker = make_broker(os.environ.get(REDIS_URL_ENV, "redis://127.0.0.1:6379/13"))
dramatiq.set_broker(broker)
actor = declare(broker)
