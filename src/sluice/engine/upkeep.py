"""Topics' upkeep, run with the session's recovery (docs/topics.md).

Drops subscriptions that ended (a non-durable one's session ended, a durable one
went unused for its ``expire_after``) and collects, a bounded range per topic per
run, the messages every subscription of a topic has taken or passed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sluice.backends.base import Backend, Selection
from sluice.engine.retention import remove_kept
from sluice.errors import QueueInUse, SluiceError

__all__ = ["upkeep"]

log = logging.getLogger("sluice")


def upkeep(
    backend: Backend,
    forget: Callable[[str], None],
    selector: Callable[[str], Selection | None],
) -> None:
    """Drop subscriptions that ended, and collect what topics' subscriptions have passed.

    ``forget``: drops what the engine caches of a queue; ``selector``: a subscription's
    checked where. Selective subscriptions that hold back their topic's collection first
    pass the messages they will never receive.
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
    for name in backend.laggards():
        try:
            backend.pass_unselected(name, selector(name))
        except SluiceError as exc:  # dropped meanwhile, or its where no longer checks
            log.debug("sluice could not pass messages for subscription %s: %s", name, exc)
    for topic in backend.topics():
        backend.collect(topic)
    remove_kept(backend)  # done messages past their queue's retention (engine/retention.py)
