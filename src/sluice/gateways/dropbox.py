"""The ``dropbox`` transport: DropboxMQ's directories (sluice.dropbox) as a gateway. An
incoming dropbox gateway stores the files dropped into ``<root>/<queue>/incoming/target/``
(first recovering what this consumer left in ``processing/``); an outgoing one writes
the queue's messages there as files for any program to take with ``mv``.

Settings: ``root`` (the dropboxes' directory, required), ``consumer_id`` (the name this
process claims files under; the host's name by default), ``keep_processed`` (true:
stored files go to ``processed/``; false: they are removed).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from sluice.dropbox import Dropbox
from sluice.errors import ConfigurationError
from sluice.gateways.model import Gateway
from sluice.gateways.transports import Transport

if TYPE_CHECKING:
    from sluice.engine.database import Engine

__all__ = ["TRANSPORT", "DropboxSide"]


def check(gateway: Gateway) -> None:
    if not gateway.text("root"):
        raise ConfigurationError(f"gateway {gateway.queue!r}: a dropbox needs its root")
    gateway.text("consumer_id")
    keep = gateway.settings.get("keep_processed", True)
    if not isinstance(keep, bool):
        raise ConfigurationError(f"gateway {gateway.queue!r}: keep_processed is true or false")


class DropboxSide:
    """One queue's dropbox, in or out."""

    def __init__(self, db: Engine, gateway: Gateway) -> None:
        root = gateway.text("root")
        assert root is not None  # check() made sure
        keep = gateway.settings.get("keep_processed", True)
        self._box = Dropbox(db, root,
                            consumer_id=gateway.text("consumer_id"),
                            keep_processed=bool(keep))  # fmt: skip
        self._queue = gateway.queue
        self._incoming = gateway.direction == "in"
        self._recovered = False

    def poll(self) -> int:
        if not self._incoming:
            return self._box.emit(self._queue)
        moved = 0
        if not self._recovered:  # what this consumer claimed before it last stopped
            moved += self._box.recover(self._queue)
            self._recovered = True
        return moved + self._box.ingest(self._queue)

    def run(self, stop: threading.Event, poll: float) -> None:
        queues = [self._queue]
        if self._incoming:
            self._box.run(inbound=queues, stop=stop)
        else:
            self._box.run(outbound=queues, stop=stop)

    def close(self) -> None:
        """Nothing held between polls."""


TRANSPORT = Transport("dropbox", ("in", "out"), check, inbound=DropboxSide)
