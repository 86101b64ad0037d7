"""Topics' upkeep, run with the session's recovery (docs/topics.md).

Drops subscriptions that ended (a non-durable one's session ended, a durable one
went unused for its ``expire_after``) and collects, a bounded range per topic per
run, the messages every subscription of a topic has taken or passed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sluice.backends.base import Backend
from sluice.engine.retention import remove_kept
from sluice.errors import QueueInUse, SluiceError

__all__ = ["upkeep"]

log = logging.getLogger("sluice")


def upkeep(backend: Backend, forget: Callable[[str], None]) -> None:
    """Drop subscriptions that ended, and collect what topics' subscriptions have passed.

    ``forget``: drops what the engine caches of a queue.
    """
    for name in backend.ended_subscriptions():
        try:
            backend.drop_queue(name)
        except QueueInUse:
            continue  # messages still held: its holder's commit or rollback comes first
        except SluiceError as exc:  # another node dropped it first, or the database hiccuped
            log.debug("sluice could not drop ended subscription %s: %s", name, exc)
            continue
        forget(name)
        log.info("sluice dropped subscription %s: it ended or was unused too long", name)
    for topic in backend.topics():
        backend.collect(topic)
    remove_kept(backend)  # done messages past their queue's retention (engine/retention.py)
