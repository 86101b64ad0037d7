"""Turns: batches of one queue, taken by concurrent workers of one engine, write in the
order they were taken.

A batch's messages go into their targets with the ids an enqueue gives, under the
targets' commit locks (see the enqueue function): whoever takes those locks first
writes first. Two workers processing successive batches of a queue would otherwise race
for them, and the later batch's messages could come first in a target. So each batch
gets a ticket as it is taken (taking is serial per queue) and waits for the tickets
before it to be done (committed or rolled back) before it writes; what comes before the
write (taking, evaluating, deciding) overlaps with the batch before it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Turns"]


class Turns:
    """The tickets of one queue's batches (see the module docstring)."""

    def __init__(self) -> None:
        self._taking = threading.Lock()
        self._changed = threading.Condition()
        self._issued = 0
        self._serving = 0
        """The first ticket not yet done: its batch may write."""
        self._done: set[int] = set()

    @contextmanager
    def taking(self) -> Iterator[int]:
        """Held while a batch is taken: its ticket, in the order batches are taken."""
        with self._taking:
            with self._changed:
                ticket = self._issued
                self._issued += 1
            yield ticket

    def wait(self, ticket: int) -> None:
        """Until every batch taken before ``ticket``'s is done."""
        with self._changed:
            self._changed.wait_for(lambda: self._serving >= ticket)

    def done(self, ticket: int) -> None:
        """``ticket``'s batch committed or rolled back: the next may write."""
        with self._changed:
            self._done.add(ticket)
            while self._serving in self._done:
                self._done.discard(self._serving)
                self._serving += 1
            self._changed.notify_all()
