"""Where a Spark position stream's next range ends (``Streams.stream_span``), for both
SQL backends: they give the queue's last message and one window's figures, this
module walks the windows."""

from __future__ import annotations

from collections.abc import Callable

from sluice.backends.records import Row

__all__ = ["NO_CEILING", "WINDOWS", "span_end"]

NO_CEILING = 2**62
"""The ceiling of a range that has none (message ids are far below it)."""

WINDOWS = 8
"""The most windows one range looks at (each up to four times as wide as the one before)."""


def span_end(
    after: int,
    limit: int,
    ends: tuple[int | None, int | None],
    window: Callable[[int, int], Row],
    nth: Callable[[int, int, int], int],
) -> tuple[int, int]:
    """The end of the range after ``after``, and how many messages it holds (at most).

    ``ends`` are the queue's first and last message past ``after`` (None: none); the
    windows start at the first. ``window(a, b)`` gives (count, last, first not due) of
    the selected messages with ids in (a, b]; ``nth(a, b, n)`` the id of the n-th.
    Windows of ids, not "the next ``limit`` messages": a window bounds what the database
    reads whatever plan it picks (an ORDER BY ... LIMIT over a range the planner
    thought held few of the queue's messages had it sort the whole range). A window is
    as wide as the messages still wanted, four times the one before if that is more (a
    queue among others holds a few ids in many), and cut at the last message wanted
    if it holds more. A message not due yet ends the range before it (were it passed,
    it would be skipped once due); with fewer than ``limit`` messages the range passes
    everything up to the last (what the selection passes over too, so that a
    subscription's topic can let it go). Every message up to the last had committed
    when the last was read (ids follow commit order), so the windows read still rows.
    """
    head, tail = ends
    if head is None or tail is None or tail <= after:
        return after, 0
    end, found, width = max(after, head - 1), 0, 0
    for _ in range(WINDOWS):
        wanted = limit - found
        width = max(wanted, width * 4)
        upto = min(tail, end + width)
        count, _, late = window(end, upto)
        if count > wanted:
            upto, count = nth(end, upto, wanted), wanted
        if late is not None and late <= upto:
            return int(late) - 1, found + int(count)
        found += int(count)
        end = upto
        if found >= limit or end >= tail:
            break
    return end, found
