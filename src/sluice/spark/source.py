"""The ``sluice`` Spark data source: batch read = browse, streaming read = consume.

Where each method runs matters (../shared/notes/spark.md): ``partitions``,
``latestOffset`` and ``commit`` run in one Python worker on the driver side;
``read`` runs in executor workers on a separately unpickled copy. So nothing
here holds a connection across pickling: every method asks ``connection(url)``,
which opens one Database per process and URL.

A streaming read is a named *stream* of the queue (``name``). Each micro-batch
is a *round*: ``latestOffset`` claims the next messages in the database under
the stream's session, with the round as their transaction number, and records
the round durably before Spark logs the offset. The offset is the round. Until
Spark has committed the batch, its messages stay held, so a restart replays
``(start, end]`` with the very same rows; once committed (``commit(end)``, or
``latestOffset(start)`` whose start is the last committed end), the rounds are
acknowledged: the messages are deleted as by any commit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sluice.backends.base import Backend
from sluice.engine.database import Engine
from sluice.spark.options import Options, connection
from sluice.spark.rows import message_ddl, table_batches, to_batches
from sluice.spark.sink import BatchWriter, StreamWriter

__all__ = ["SluiceDataSource"]

_PAGE = 10_000
"""Rows per query of a batch read's partition (keyset pages by id)."""

_CLAIM_CHUNK = 50_000
"""Messages per claim statement of a round."""


class SluiceDataSource(DataSource):
    """``spark.read.format("sluice")``: options url, queue, where, name, max_per_batch, ..."""

    @classmethod
    def name(cls) -> str:
        return "sluice"

    def schema(self) -> str:
        return message_ddl(Options.parse(self.options).body_schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = Options.parse(self.options)
        # Spark refuses a reader that has pushFilters unless its pushdown setting is on:
        # only a read that asks for pushdown gets one.
        if options.pushdown:
            return _PushdownReader(options, schema)
        return _BatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(Options.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(Options.parse(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(Options.parse(self.options), schema, overwrite)


# --- batch read: browse -----------------------------------------------------------------


@dataclass(frozen=True)
class _Range(InputPartition):
    after: int
    upto: int
    where: str | None


# Filters Spark may hand over, by column, as the expression language spells the column.
# Only exact translations: times are not pushed (Spark's microseconds against stored
# seconds could disagree at the edge), nor columns the language does not know.
_PUSHABLE = {
    "priority": "priority",
    "attempts": "attempts",
    "type": "type",
    "correlation_id": "correlation_id",
    "reply_to": "reply_to",
    "content_type": "content_type",
}
_NUMERIC = {"priority", "attempts"}
_EXACT_DOUBLE = 2**53


class _BatchReader(DataSourceReader):
    def __init__(self, options: Options, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.queue = options.need_queue()
        self.pushed: list[str] = []
        # Checked now, on the driver: a bad selector fails the query, not a task.
        connection(options.url).selection(self.queue, options.where)

    def _where(self) -> str | None:
        parts = [f"({self.options.where})"] if self.options.where else []
        parts += [f"({p})" for p in self.pushed]
        return " AND ".join(parts) or None

    def partitions(self) -> Sequence[InputPartition]:
        db = connection(self.options.url)
        where = self._where()
        db.selection(self.queue, where)  # the pushed filters parse, or fail here
        low, high, count = db.backend.id_bounds(self.queue)
        if count == 0:
            return [_Range(0, 0, where)]
        wanted = self.options.partitions or -(-count // self.options.rows_per_partition)
        parts = max(1, min(wanted, high - low + 1))
        step = -(-(high - low + 1) // parts)
        return [
            _Range(low - 1 + k * step, min(high, low - 1 + (k + 1) * step), where)
            for k in range(parts)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        db = connection(self.options.url)
        select = db.selection(self.queue, partition.where)
        backend = db.backend
        after = partition.after
        while after < partition.upto:
            rows = backend.scan(
                self.queue, self.options.state, after, partition.upto, limit=_PAGE, select=select
            )
            if not rows:
                return
            yield from to_batches(self.queue, rows, self.schema)
            if len(rows) < _PAGE:
                return
            after = rows[-1][0]


class _PushdownReader(_BatchReader):
    """A batch read with option pushdown=true (and spark.sql.python.filterPushdown.enabled)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take the filters the database can apply exactly; Spark applies the rest.

        Spark 4.3 keeps the reader of a planned query and reuses it, pushed
        filters and all, for later queries of the same DataFrame that push
        nothing, whose rows the old filters would then hide (docs/spark.md shows
        the case). So pushdown is for a DataFrame read for one query.
        """
        self.pushed = []
        for f in filters:
            text = _translate(f)
            if text is None:
                yield f
            else:
                self.pushed.append(text)


def _translate(f: Filter) -> str | None:  # noqa: PLR0911  (one case per filter kind)
    """A Spark filter as an expression over the message, or None if not exactly one."""
    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attribute) != 1 or attribute[0] not in _PUSHABLE:
        return None
    column = _PUSHABLE[attribute[0]]
    if isinstance(f, IsNull):
        return f"{column} IS NULL"
    if isinstance(f, IsNotNull):
        return f"{column} IS NOT NULL"
    operators = {
        EqualTo: "=",
        GreaterThan: ">",
        GreaterThanOrEqual: ">=",
        LessThan: "<",
        LessThanOrEqual: "<=",
    }
    operator = operators.get(type(f))
    if operator is not None:
        literal = _literal(column, f.value)  # type: ignore[attr-defined]
        return None if literal is None else f"{column} {operator} {literal}"
    if isinstance(f, In):
        literals = [_literal(column, v) for v in f.value]
        if not literals or any(v is None for v in literals):
            return None
        return f"{column} IN ({', '.join(str(v) for v in literals)})"
    return None


def _literal(column: str, value: Any) -> str | None:
    if column in _NUMERIC:
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > _EXACT_DOUBLE:
            return None  # numbers are doubles in expressions: only exact ones are pushed
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return None


# --- streaming read: consume ------------------------------------------------------------


@dataclass(frozen=True)
class _Share(InputPartition):
    session: int
    after: int
    upto: int
    part: int
    parts: int


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.queue = options.need_queue()
        self.name = options.need_name("streaming read")
        self.cutoff: float | None = None
        connection(options.url).selection(self.queue, options.where)

    def _backend(self) -> Backend:
        return connection(self.options.url).backend

    def initialOffset(self) -> dict[str, int]:
        # A new checkpoint starts after what the stream acknowledged: rounds it still
        # holds (a previous checkpoint's unfinished batch) come first.
        return {"round": self._backend().open_stream(self.queue, self.name).acked}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        # "Available now": what was enqueued before this moment, not what comes later.
        self.cutoff = connection(self.options.url).clock.now()  # enqueued_at's clock

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        db = connection(self.options.url)
        backend = db.backend
        stream = backend.open_stream(self.queue, self.name)
        if start is not None:
            # Spark plans batch N+1 only once batch N is committed: what ends at
            # start is done, and acknowledging it now leaves nothing held in idle times.
            acknowledge(db, self.queue, stream.session, stream.acked, start["round"])
        base = stream.acked if start is None else start["round"]
        if isinstance(limit, ReadAllAvailable):
            cap = 2**62
        elif isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        else:
            cap = self.options.max_per_batch
        held = backend.stream_held_count(stream.session, self.queue, base, stream.round)
        if held >= cap:
            return {"round": stream.round}
        round_ = stream.round + 1
        taken = self._claim(db, stream.session, round_, cap - held)
        if taken:
            # Durable, and after the claims: their rows are durable with it. Only then
            # may Spark log the offset.
            backend.set_stream_round(stream.session, round_)
            return {"round": round_}
        return {"round": max(stream.round, base) if held else base}

    def _claim(self, db: Engine, session: int, round_: int, wanted: int) -> int:
        """Claim up to ``wanted`` messages for ``round_``; how many it took."""
        where = self.options.where
        if self.cutoff is not None:
            bound = f"enqueued_at <= {self.cutoff!r}"
            where = f"({where}) AND {bound}" if where else bound
        select = db.selection(self.queue, where)
        lanes = db.queue(self.queue).spec.isolation != "none"
        taken = 0
        while taken < wanted:
            chunk = min(_CLAIM_CHUNK, wanted - taken)
            if lanes:
                # The engine's claim takes lanes' runs (and only it knows how); it
                # returns the rows, which are read again in the tasks.
                got = len(
                    db.backend.claim(session, round_, self.queue, chunk, own=False, select=select)
                )
            else:
                got = db.backend.stream_claim(session, round_, self.queue, chunk, select)
            if got <= 0:
                break
            taken += got
        return taken

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        after, upto = start["round"], end["round"]
        if upto <= after:
            return []
        session = self._backend().open_stream(self.queue, self.name).session
        parts = self.options.partitions or 1
        return [_Share(session, after, upto, k, parts) for k in range(parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Share)
        backend, p = self._backend(), partition
        share = {"part": p.part, "parts": p.parts}
        rows = backend.stream_held(p.session, self.queue, p.after, p.upto, spooled=False, **share)
        yield from to_batches(self.queue, rows, self.schema)
        for table in backend.stream_spooled(p.session, p.after, p.upto, **share):
            yield from table_batches(self.queue, table, self.schema)

    def commit(self, end: dict[str, int]) -> None:
        db = connection(self.options.url)
        stream = db.backend.open_stream(self.queue, self.name)
        acknowledge(db, self.queue, stream.session, stream.acked, end["round"])


def acknowledge(db: Engine, queue: str, session: int, acked: int, upto: int) -> None:
    """Settle the stream's rounds (acked, upto]: Spark has committed them."""
    if upto > acked:
        db.backend.stream_settle(session, queue, acked, upto)
