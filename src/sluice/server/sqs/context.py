"""What an SQS operation is given: the app's database and leases, whom the request's
key stands for, and how queue URLs and ARNs are spelled for this request."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import sluice
from sluice.catalog import QueueSpec
from sluice.errors import ConfigurationError, QueueNotFound
from sluice.server.asyncdb import AsyncDb
from sluice.server.grants import Principal
from sluice.server.leases import Leases
from sluice.server.offload import Offload
from sluice.server.sqs.errors import SqsError, access_denied, no_queue
from sluice.server.sqs.held import Acks
from sluice.server.sqs.settings import QueueSettings

__all__ = ["ACCOUNT", "REMEMBERED", "SETTINGS_REMEMBERED", "Call", "SqsState"]

REMEMBERED = 100_000
"""How many receipt handles of deleted messages the endpoint remembers."""

SETTINGS_REMEMBERED = 1.0
"""Seconds a queue's SQS attributes are used as read (as a key is: grants.REMEMBER): a
change made through another server is seen within this."""

ACCOUNT = "000000000000"
"""The account id in queue URLs and ARNs (one sluice database is one account)."""


@dataclass(slots=True)
class SqsState:
    """The endpoint's state in the app: its account id, the ``scheme://host`` of its
    queue URLs (None: the request's own), when each queue was last purged (SQS allows
    one PurgeQueue a minute), and the receipt handles whose message was deleted."""

    account: str = ACCOUNT
    base: str | None = None
    purged: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    deleted: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """Receipt handle -> queue, for the last REMEMBERED handles whose message was
    deleted: deleting by one again succeeds, as SQS's does (a retried DeleteMessage whose
    answer was lost must not fail)."""

    issued: OrderedDict[str, None] = field(default_factory=OrderedDict)
    """The last REMEMBERED receipt handles given out: a stale one is told from a made-up
    one in the refusal's message."""

    settings: dict[str, tuple[QueueSettings, float]] = field(default_factory=dict)
    """Queue -> its SQS attributes and when they were read (time.monotonic): sends and
    receives read them without a round trip to the database for SETTINGS_REMEMBERED
    seconds; this server's own changes forget them at once (``forget``)."""

    def forget(self, name: str | None = None) -> None:
        """The remembered attributes of queue ``name`` (None: of every queue) are read
        anew: this server changed or dropped them."""
        with self.lock:
            if name is None:
                self.settings.clear()
            else:
                self.settings.pop(name, None)

    def remember(self, handles: OrderedDict[str, Any], handle: str, value: Any) -> None:
        """Note ``handle`` in ``handles`` (issued or deleted), the newest REMEMBERED kept."""
        with self.lock:
            handles[handle] = value
            while len(handles) > REMEMBERED:
                handles.popitem(last=False)


@dataclass(slots=True)
class Call:
    """One request's operation: the app's parts and the request's principal."""

    db: sluice.Database
    leases: Leases
    aio: AsyncDb
    who: Principal
    state: SqsState
    region: str
    base: str
    """``scheme://host`` the request was sent to: queue URLs are made from it."""
    offload: Offload
    """The app's threads for blocking work (server/offload.py)."""
    acks: Acks
    """Where the acks of one turn of the event loop commit together (sqs/held.py)."""

    def url(self, name: str) -> str:
        return f"{self.state.base or self.base}/{self.state.account}/{name}"

    def arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{self.state.account}:{name}"

    def need(self, name: str, action: str) -> None:
        if not self.who.allows(name, action):
            raise access_denied(self.who.name, action, name)

    def sees(self, name: str) -> bool:
        return any(self.who.allows(name, a) for a in ("produce", "consume", "browse", "manage"))

    def spec(self, name: str) -> QueueSpec:
        """The sluice queue ``name``; NonExistentQueue if there is none (or a topic)."""
        try:
            spec = self.db.context.spec(name)
        except (QueueNotFound, ConfigurationError):
            raise no_queue() from None
        if spec.kind == "topic":
            raise no_queue()
        return spec

    def queue_of(self, params: dict[str, Any], action: str | None = None) -> str:
        """The queue a request's ``QueueUrl`` names (its last path segment, or a bare
        name), checked to exist and, with ``action``, to be allowed."""
        url = params.get("QueueUrl")
        if url is None:
            raise SqsError("MissingParameter", "The request must contain the parameter QueueUrl.")
        if not isinstance(url, str):
            raise SqsError("InvalidParameterValue", "QueueUrl must be a string")
        name = url.rstrip("/").rsplit("/", 1)[-1]
        if not self.sees(name):
            if action is not None:
                raise access_denied(self.who.name, action, name)
            raise no_queue()
        self.spec(name)
        if action is not None:
            self.need(name, action)
        return name

    def settings(self, name: str) -> QueueSettings:
        """The queue's SQS attributes, as read within SETTINGS_REMEMBERED seconds."""
        now = time.monotonic()
        with self.state.lock:
            seen = self.state.settings.get(name)
        if seen is not None and now - seen[1] < SETTINGS_REMEMBERED:
            return seen[0]
        stored = self.db.backend.sqs_queue_find(name)
        settings = QueueSettings(json.loads(stored.attributes) if stored else {})
        with self.state.lock:
            if len(self.state.settings) >= REMEMBERED:
                self.state.settings.clear()
            self.state.settings[name] = (settings, now)
        return settings
