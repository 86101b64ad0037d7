"""What an SQS operation is given: the app's database and leases, whom the request's
key stands for, and how queue URLs and ARNs are spelled for this request."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import sluice
from sluice.catalog import QueueSpec
from sluice.errors import ConfigurationError, QueueNotFound
from sluice.server.asyncdb import AsyncDb
from sluice.server.grants import Principal
from sluice.server.leases import Leases
from sluice.server.sqs.errors import SqsError, access_denied, no_queue
from sluice.server.sqs.settings import QueueSettings

__all__ = ["ACCOUNT", "Call", "SqsState"]

ACCOUNT = "000000000000"
"""The account id in queue URLs and ARNs (one sluice database is one account)."""


@dataclass(slots=True)
class SqsState:
    """The endpoint's state in the app: its account id, and when each queue was last
    purged (SQS allows one PurgeQueue a minute)."""

    account: str = ACCOUNT
    purged: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


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

    def url(self, name: str) -> str:
        return f"{self.base}/{self.state.account}/{name}"

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
        stored = self.db.backend.sqs_queue_find(name)
        return QueueSettings(json.loads(stored.attributes) if stored else {})
