"""Exchange bindings every process sees: kept as messages of one sluice queue.

kombu's virtual transports keep exchanges and bindings in the memory of the
process that declared them, so a fanout published by ``celery inspect`` in one
process cannot reach the remote-control queue a worker bound in another. Here
each binding is a message of the queue ``_kombu.bindings`` in the same database,
written once by whoever binds, browsed (never taken) by whoever publishes, and
taken with a selection to be deleted. A binding written twice by two processes
at once is harmless: kombu's exchange types route to a set of queues.
"""

from __future__ import annotations

from collections.abc import Iterator

import sluice

__all__ = ["BINDINGS", "Binding", "Bindings"]

BINDINGS = "_kombu.bindings"
"""The sluice queue holding the bindings (names starting with ``_`` are never kombu's)."""

Binding = tuple[str, str, str]
"""A routing table row as kombu's exchange types read it: routing key, pattern, queue."""

_PAGE = 500


def _text(value: str) -> str:
    """``value`` as a quoted literal of sluice's expression language."""
    return "'" + value.replace("'", "''") + "'"


class Bindings:
    """The shared routing tables of one sluice database."""

    def __init__(self, db: sluice.Database) -> None:
        self._db = db
        self._queue = db.create_queue(BINDINGS, exist_ok=True)

    def _rows(self, where: str) -> Iterator[sluice.Message]:
        after = None
        while True:
            page = self._queue.browse(_PAGE, where=where, after=after)
            yield from page
            if len(page) < _PAGE:
                return
            after = page[-1].position

    def table(self, exchange: str) -> tuple[str | None, list[Binding]]:
        """The exchange's type as its binders declared it (None: no bindings) and its rows."""
        kind = None
        rows = []
        for message in self._rows(f"body.exchange = {_text(exchange)}"):
            body = message.body
            assert isinstance(body, dict)
            kind = body["type"]
            rows.append((body["routing_key"], body["pattern"], body["queue"]))
        return kind, rows

    def add(self, exchange: str, kind: str, routing_key: str, pattern: str, queue: str) -> None:
        """Bind ``queue`` to ``exchange`` unless it is bound so already."""
        where = (
            f"body.exchange = {_text(exchange)} AND body.queue = {_text(queue)} "
            f"AND body.routing_key = {_text(routing_key)}"
        )
        if self._queue.browse(1, where=where):
            return
        self._queue.put(
            {
                "exchange": exchange,
                "type": kind,
                "routing_key": routing_key,
                "pattern": pattern,
                "queue": queue,
            }
        )

    def remove(
        self,
        *,
        queue: str | None = None,
        exchange: str | None = None,
        routing_key: str | None = None,
    ) -> int:
        """Delete the bindings matching every argument given, in one transaction."""
        terms = [
            f"body.{field} = {_text(value)}"
            for field, value in (
                ("queue", queue),
                ("exchange", exchange),
                ("routing_key", routing_key),
            )
            if value is not None
        ]
        removed = 0
        with self._db.transaction() as tx:
            while taken := tx.dequeue(BINDINGS, limit=_PAGE, where=" AND ".join(terms) or None):
                removed += len(taken)
        return removed
