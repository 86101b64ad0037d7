"""Turns: batches of one queue, taken by concurrent workers of one engine, write in the
order they were taken.

A batch's messages go into their targets with the ids an enqueue gives, under the
targets' commit locks (see the enqueue function): whoever takes those locks first
writes first. Two workers processing successive batches of a queue would otherwise race
for them, and the later batch's messages could come first in a target. So each batch
gets a ticket as it is taken (taking is serial per queue) and waits for the tickets
before it to be done (committed or rolled back) before it writes; what comes before the
write (taking, evaluating, deciding) overlaps with the batch before it.

A batch rolled back (its connection lost, the rules changed) leaves its messages at the
front of the queue, and the batches taken after it may hold messages behind them (on
PostgreSQL a take skips the rows another holds): they must not write first, or the
messages made from the queue come out of its order (the fault campaign found it). So
they are rolled back too (``wait`` raises Retake), and no batch is taken until all of
them are done: the next take starts at the front again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Retake", "Turns"]


class Retake(Exception):
    """A batch taken before this one was rolled back: roll this one back, take again."""


class Turns:
    """The tickets of one queue's batches (see the module docstring)."""

    def __init__(self) -> None:
        self._taking = threading.Lock()
        self._changed = threading.Condition()
        self._issued = 0
        self._serving = 0
        """The first ticket not yet done: its batch may write."""
        self._done: set[int] = set()
        self._void: set[int] = set()
        """Tickets taken after a batch that was rolled back: they roll back too."""

    @contextmanager
    def taking(self) -> Iterator[int]:
        """Held while a batch is taken: its ticket, in the order batches are taken."""
        with self._taking:
            with self._changed:
                # After a rollback, the batches it voided let go of their messages first.
                self._changed.wait_for(lambda: not self._void or self._serving == self._issued)
                self._void.clear()
                ticket = self._issued
                self._issued += 1
            yield ticket

    def wait(self, ticket: int) -> None:
        """Until every batch taken before ``ticket``'s is done; Retake if one of them was
        rolled back."""
        with self._changed:
            self._changed.wait_for(lambda: self._serving >= ticket)
            if ticket in self._void:
                raise Retake("a batch taken before this one was rolled back")

    def done(self, ticket: int, *, rolled_back: bool = False) -> None:
        """``ticket``'s batch committed or rolled back: the next may write, unless it was
        rolled back (not for a Retake): then every batch taken after it is void."""
        with self._changed:
            if rolled_back:
                self._void.update(range(ticket + 1, self._issued))
            self._done.add(ticket)
            while self._serving in self._done:
                self._done.discard(self._serving)
                self._serving += 1
            self._changed.notify_all()
