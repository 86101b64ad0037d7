"""Where a Spark position stream's next range ends (``Streams.stream_span``), for both
SQL backends: their ``stream_span`` statements return the same four figures."""

from __future__ import annotations

from sluice.backends.records import Row

__all__ = ["NO_CEILING", "span_end"]

NO_CEILING = 2**62
"""The ceiling of a range that has none (message ids are far below it)."""


def span_end(after: int, limit: int, found: Row) -> tuple[int, int]:
    """The end of the range after ``after``, from (count, last, first not due, tail),
    and the count: how many messages the statement found, at most ``limit``.

    A message not due yet stops the range before it: were it passed, it would be
    skipped once due. With ``limit`` messages the range ends at the last of them;
    with fewer, it passes everything up to the queue's last message (the messages the
    selection passed over, so that a subscription's topic can let them go).
    """
    count, last, late, tail = found
    if late is not None:
        return int(late) - 1, count
    if count >= limit:
        return int(last), count
    return (after if tail is None else max(int(tail), after)), count
