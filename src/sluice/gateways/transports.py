"""The transports a gateway queue may use, by name, and what each needs.

An outgoing transport delivers one message (``Outbound.deliver``) or raises
``DeliveryFailed``; an incoming one brings in what arrived (``Inbound.poll``). A
transport's ``check`` refuses settings it cannot work with when the gateway is
defined, so a mistake shows at ``apply`` or ``define`` rather than at the first
message. The transports by name are in ``registry``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from sluice.gateways.model import Direction, Gateway
from sluice.message import Body, Message

if TYPE_CHECKING:
    from sluice.engine.database import Engine

__all__ = ["Delivered", "Inbound", "Outbound", "Transport"]


class Outbound(Protocol):
    def deliver(self, message: Message) -> Delivered | None:
        """Send ``message``; what came back (None: nothing to keep). DeliveryFailed if
        it could not be sent."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Delivered:
    """A reply to keep: enqueued into the gateway's reply queue, correlated to the
    message it answers, in the transaction that settles that message."""

    body: Body
    content_type: str
    properties: dict[str, str | int | float | bool]


class Inbound(Protocol):
    """A side that moves messages itself, in either direction (a dropbox's files in, or
    a queue's messages out as files): ``poll`` once, or ``run`` until ``stop``."""

    def poll(self) -> int:
        """Move what is there now; how many messages."""
        ...

    def run(self, stop: threading.Event, poll: float) -> None:
        """Move messages as they come until ``stop`` (woken by events where the transport
        has them, else every ``poll`` seconds)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Transport:
    """A transport: the directions it serves, how to check a gateway's settings, and how
    to make its outbound or inbound side for a database."""

    name: str
    directions: tuple[Direction, ...]
    check: Callable[[Gateway], None]
    outbound: Callable[[Engine, Gateway], Outbound] | None = None
    """Per message, run by a Sender (out only)."""
    inbound: Callable[[Engine, Gateway], Inbound] | None = None
    """A side of its own, polled or run (in, or out where the transport moves batches)."""
