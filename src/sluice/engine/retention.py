"""Removing kept outcomes past their queue's retention, run with the session's recovery.

A queue with ``retention`` keeps what its transactions settle as done
(docs/retention.md); this deletes those older than the retention a batch at a
time, each batch its own short database transaction, so producers and
consumers interleave with it and the lease keeper's tick stays short.
"""

from __future__ import annotations

from sluice.backends.base import Retention

__all__ = ["BATCH", "MAX_BATCHES", "remove_kept"]

BATCH = 1_000
"""Done messages one statement removes at most."""

MAX_BATCHES = 50
"""Batches one run removes at most (50,000 messages): a backlog of expired history
(retention shortened, say) drains over several runs instead of holding up one tick."""


def remove_kept(backend: Retention) -> int:
    """Delete done messages past their queue's retention, at most MAX_BATCHES batches."""
    removed = 0
    for _ in range(MAX_BATCHES):
        gone = backend.remove_kept(BATCH)
        removed += gone
        if gone < BATCH:
            break
    return removed
