"""The Spark pair of the storage seam: ``Streams`` (what the source reads) and ``Sinks``
(what the sink writes), mixed into ``Backend`` and re-exported by ``backends.base``.

The promises of ``backends.base``'s docstring hold for every method here too: each is
one atomic unit of work, and a driver error surfaces as a ``StorageError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from sluice.backends.records import (
    HeldRow,
    Reached,
    Row,
    Selection,
    StagedPart,
    StreamState,
)

if TYPE_CHECKING:
    import pyarrow as pa  # sluice-queue[spark]

__all__ = ["Sinks", "Streams"]


class Streams(Protocol):
    """What the Spark source needs: streams with rounds, reads by id range, positions."""

    def open_stream(self, queue: str, name: str) -> StreamState:
        """The stream ``name`` of ``queue``, created with its session if new."""

    def set_stream_round(self, session: int, round: int) -> None:
        """Record the last round begun, durably (with the claims made before it)."""

    def set_stream_acked(self, session: int, acked: int) -> None:
        """Record the last round acknowledged."""

    def stream_held(
        self,
        session: int,
        queue: str,
        after: int,
        upto: int,
        *,
        part: int = 0,
        parts: int = 1,
        spooled: bool = True,
    ) -> list[HeldRow]:
        """Messages the stream holds from rounds (after, upto], id modulo ``parts`` = ``part``.

        Rows in MESSAGE_COLUMNS order and then the round, by round and id; without
        the spooled ones (stream_spooled) if ``spooled`` is false.
        """

    def stream_spooled(
        self, session: int, after: int, upto: int, *, part: int = 0, parts: int = 1
    ) -> list[pa.Table]:
        """The rounds (after, upto] a backend keeps moved out of the queue, id mod parts = part.

        Arrow tables of the MESSAGE_COLUMNS, ``body_bytes`` (hex text) and ``round``:
        a reader can convert them without a Python object per message. Their rows are
        among stream_held's too; backends that claim in place return none.
        """

    def stream_held_count(self, session: int, queue: str, after: int, upto: int) -> int:
        """How many messages the stream holds from rounds (after, upto]."""

    def stream_claim(
        self, session: int, round: int, queue: str, limit: int, select: Selection | None
    ) -> int:
        """Claim up to ``limit`` ready messages in delivery order for the stream's ``round``.

        How many it took. Of a lane only its head is ready: a queue with lanes gets at
        most one message of each lane per call (the engine's claim takes their runs).
        Not durable by itself: set_stream_round's commit makes it so.
        """

    def stream_settle(
        self, session: int, queue: str, after: int, upto: int, *, reached: Reached | None = None
    ) -> None:
        """Spark committed rounds (after, upto]: settle them, in one transaction.

        What the stream holds of them is deleted (kept as done where the queue has
        ``retention``), their lanes get heads, and ``upto`` is recorded as acknowledged.
        ``reached``: a position stream's ranges up to it are done too: ``queue``'s pointer
        moves to it (never back), and with ``remove`` the messages those ranges read,
        between the old pointer and it, are deleted.
        """

    def stream_pointer(self, queue: str) -> int:
        """The queue's pointer: how far its position stream has read (a subscription's
        place in its topic). QueueNotFound if there is no such queue."""

    def stream_last(self, queue: str, after: int, ceiling: int = ...) -> int | None:
        """The highest message id of ``queue`` in (after, ceiling] (no ceiling by default),
        pending messages aside, or None."""

    def stream_span(
        self,
        queue: str,
        after: int,
        *,
        limit: int,
        ceiling: int,
        now: float,
        select: Selection | None,
    ) -> tuple[int, int]:
        """The end of a position stream's next range of ``queue``'s messages after ``after``,
        and how many messages it found (at most ``limit``: fewer, and it reached the end).

        It holds up to ``limit`` messages ``select`` holds for that are ready or waiting
        (states 1, 5) and unexpired at ``now``, none above ``ceiling``; it stops before
        the first of them that is not yet due (delivery by position keeps order), and when
        fewer than ``limit`` are there, it passes every message up to the last one. The
        range (after, end] then reads the same rows whenever it is read (``stream_rows``
        at ``now``) until it is acknowledged. The end is ``after`` when there is nothing new.
        """

    def stream_rows(
        self,
        queue: str,
        after: int,
        upto: int,
        *,
        at: float,
        limit: int,
        select: Selection | None,
    ) -> list[Row]:
        """Up to ``limit`` messages of a position range: ids in (after, upto], by id, as
        rows of READ_COLUMNS.

        Those ``select`` holds for that were due and unexpired at ``at``: ready or
        waiting, or expired since (state 3 with ``expires_at`` after ``at``).
        """

    def stream_table(
        self,
        queue: str,
        after: int,
        upto: int,
        *,
        at: float,
        limit: int,
        select: Selection | None,
    ) -> pa.Table | None:
        """What ``stream_rows`` reads, as one Arrow table of READ_COLUMNS (``body_bytes``
        binary), made without a Python object per row; None where this backend reads rows
        only, and the caller then reads them with ``stream_rows``."""

    def stream_behind(
        self, queue: str, position: int | None, *, limit: int, select: Selection | None
    ) -> int:
        """How many ready messages of ``queue`` (at most ``limit``) a position stream must
        take by rounds: those with ids up to ``position`` (None: every one) that
        ``select`` holds for. A subscription's own rows (pulled by a consumer before), or
        in a queue messages that came back behind its position."""

    def scan(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> list[Row]:
        """Up to ``limit`` messages in ``state`` (as browse) with ids in (after, upto], by id,
        as rows of READ_COLUMNS."""

    def scan_table(
        self, queue: str, state: str, after: int, upto: int, *, limit: int, select: Selection | None
    ) -> pa.Table | None:
        """What ``scan`` reads, as ``stream_table`` reads what ``stream_rows`` does; None where
        this backend reads rows only."""

    def id_bounds(self, queue: str) -> tuple[int, int, int]:
        """The lowest and highest id of the queue's messages, and how many there are."""

    def drop_stream(self, queue: str, name: str) -> bool:
        """Forget a stream, giving back what it holds; False if there was none."""


class Sinks(Protocol):
    """What the Spark sink needs: staged messages published at once, once per batch."""

    def sink_batch(self, sink: str) -> int | None:
        """The last micro-batch the streaming sink published, or None."""

    def forget_sink(self, sink: str) -> None:
        """Forget a streaming sink's last batch (its query starts over)."""

    def close_staging(self, host: str, batch: int | None = None) -> None:
        """End every session labelled ``host`` (an aborted batch write's), dropping their rows.

        With ``batch``: only those of that micro-batch (an aborted streaming batch's).
        """

    def publish_staged(
        self, parts: Sequence[StagedPart], sink: str | None = None, batch: int = 0
    ) -> bool:
        """Publish staged messages at once and end their sessions; False if ``sink`` had ``batch``.

        LeaseLost, and nothing published, if a part's rows are not all there.
        """
