"""An outgoing gateway's throughput profile: the ``profile`` setting names a task type
whose time-of-week profile (``db.jobs.set_profile``) caps the gateway's sends per hour
and per cycle, judged on the database's clock.

The gateway counts its own sends, apart from the task type's task starts, in the jobs'
rate windows (the ``rate_windows`` table) under the key ``gateway:<queue>``: one row per
window, taken with a conditional UPDATE, so every process sending for the gateway draws
on one allowance and a restart keeps the hour's count. A send is counted before its
message is taken, and given back when the message is not sent after all (none waiting,
the sender stopped, or it became an error message without reaching the server). A
process killed between the count and the commit keeps the count while its message is
sent again: the cap may be reached by fewer mails than it allows, never exceeded by the
sends counted.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sluice.errors import ConfigurationError, UnknownTaskType
from sluice.gateways.model import Gateway
from sluice.jobs.catalog import TaskTypes
from sluice.jobs.limits import Gate, Starts

if TYPE_CHECKING:
    from sluice.engine.database import Engine

__all__ = ["Throttle", "window_key"]


def window_key(queue: str) -> str:
    """The key of ``queue``'s gateway in the rate windows (``db.jobs.usage`` reads it)."""
    return f"gateway:{queue}"


class Throttle:
    """Takes sends for ``gateway`` within the profile its ``profile`` setting names."""

    def __init__(self, db: Engine, gateway: Gateway, name: str) -> None:
        self._db = db
        self._name = name
        self._key = window_key(gateway.queue)
        self._types = TaskTypes(db)
        self._gate = Gate(db, {})

    @staticmethod
    def check(db: Engine, gateway: Gateway, *, sends: bool) -> None:
        """ConfigurationError unless ``gateway``'s ``profile`` names a stored profile and
        the gateway ``sends`` messages one at a time (a Sender: outgoing, not dropbox)."""
        name = gateway.text("profile")
        if name is None:
            return
        if gateway.direction != "out" or not sends:
            raise ConfigurationError(
                f"gateway {gateway.queue!r}: a profile limits outgoing gateways whose "
                f"messages a sender takes one by one; the {gateway.transport} transport "
                f"{'moves them itself' if gateway.direction == 'out' else 'brings them in'}"
            )
        try:
            profile = TaskTypes(db).get(name).profile
        except UnknownTaskType:
            profile = None
        if profile is None:
            raise ConfigurationError(
                f"gateway {gateway.queue!r}: no profile {name!r}; define the task type and "
                f"set its profile first: db.jobs.define({name!r}) and "
                f"db.jobs.set_profile(Profile({name!r}, ...))"
            )

    def take(self) -> tuple[Starts | None, float]:
        """One send: (counted, 0), or (None, when the full window ends) while the cap in
        force is used up. A profile cleared since the gateway was defined limits
        nothing; a task type gone holds every send back."""
        now = self._db.clock.now()
        try:
            task_type = self._types.get(self._name)
        except UnknownTaskType:
            return None, now
        own = dataclasses.replace(task_type, name=self._key)
        return self._gate.take(own, now)

    def give_back(self, starts: Starts) -> None:
        self._gate.give_back(starts)
