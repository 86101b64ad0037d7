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

A stream of a subscription, or of a queue with option ``exclusive``, reads by
*position* instead: ids follow commit order within a queue, so a range of them
holds still once read. Its offset adds the range's end and when it was planned;
nothing is written per message until Spark commits, and then only the queue's
pointer moves (an exclusive queue's range is deleted with one statement). What
lies behind the position still goes by rounds (``_latest_position``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

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

from sluice.backends.base import Backend, Reached, Row, Selection, StreamState
from sluice.backends.stream_positions import NO_CEILING
from sluice.backends.topics import TOUCH_EVERY
from sluice.engine.database import Engine
from sluice.engine.topics import before_take
from sluice.errors import ConfigurationError, QueueInUse
from sluice.spark.options import Options, connection
from sluice.spark.rows import (
    message_ddl,
    read_batches,
    read_table_batches,
    table_batches,
    to_batches,
)
from sluice.spark.sink import BatchWriter, StreamWriter

__all__ = ["SluiceDataSource"]

_PAGE = 10_000
"""Rows per query of a batch read's partition (keyset pages by id)."""

_CLAIM_CHUNK = 50_000
"""Messages per claim statement of a round."""

_WIDEST = 16 * _PAGE
"""The widest id window a read's page looks at (a queue among many takes a few ids in ten)."""


Page: TypeAlias = "list[Row] | pa.Table"
"""A page of a read: rows of READ_COLUMNS, or the same as an Arrow table (``stream_table``)."""


def _last_id(rows: Page) -> int:
    if isinstance(rows, pa.Table):
        return int(rows.column(0)[-1].as_py())
    return int(rows[-1][0])


def _ahead(pages: Iterator[Page]) -> Generator[Page, None, None]:
    """``pages``, each fetched in a thread while the caller turns the one before into
    batches and hands them to Spark: the database's work and the driver's parsing overlap
    Arrow's and the JVM's (ADBC and psycopg wait and parse without the GIL).

    Read only: the pages are the same, in the same order; the offsets and commits are
    the planner's, untouched. At most two pages are held beyond the caller's.
    """
    ready: queue.Queue[Page | BaseException | None] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item: Page | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
            except queue.Full:
                continue
            return True
        return False

    def fetch() -> None:
        try:
            for page in pages:
                if not put(page):
                    return
            put(None)
        except BaseException as exc:  # raised in the reading thread, where Spark sees it
            put(exc)

    thread = threading.Thread(target=fetch, name="sluice-read-ahead", daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        # A reader that stops early (Spark's limit, a failed task) lets the thread go: it
        # ends once the page it may be fetching is in.
        stop.set()
        thread.join()


def _batches(queue: str, pages: Iterator[Page], schema: StructType) -> Iterator[pa.RecordBatch]:
    """A read's pages, rows or Arrow tables, as Arrow batches of ``schema``."""
    for rows in pages:
        if isinstance(rows, pa.Table):
            yield from read_table_batches(queue, rows, schema)
        else:
            yield from read_batches(queue, rows, schema)


def _range_pages(
    backend: Backend, source: str, after: int, upto: int, *, at: float, select: Selection | None
) -> Iterator[Page]:
    """The pages of a position range of ``source``: what was due and unexpired at ``at``."""

    def page(a: int, b: int) -> Page:
        # In columns where the backend can (PostgreSQL): no Python object per row.
        table = backend.stream_table(source, a, b, at=at, limit=_PAGE, select=select)
        if table is not None:
            return table
        return backend.stream_rows(source, a, b, at=at, limit=_PAGE, select=select)

    return _pages(page, after, upto)


def _pages(page: Callable[[int, int], Page], after: int, upto: int) -> Iterator[Page]:
    """The rows of ids (after, upto], a page at a time: ``page(a, b)``, ids (a, b], by id.

    Each page looks at a window of ids, not "the next _PAGE rows": the window bounds
    what the database reads whatever plan it picks (an ORDER BY id LIMIT over a range
    it thought held few of the queue's rows had it sort the whole range, per page). A
    window widens while it finds few rows, and a full page goes on from its last row.
    """
    width = _PAGE
    while after < upto:
        end = min(upto, after + width)
        rows = page(after, end)
        if len(rows):
            yield rows
        if len(rows) >= _PAGE:
            after, width = _last_id(rows), max(_PAGE, width // 2)
        else:
            after = end
            if len(rows) < _PAGE // 2:
                width = min(_WIDEST, width * 2)


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
        backend, state = db.backend, self.options.state

        def page(after: int, upto: int) -> Page:
            # In columns where the backend can (PostgreSQL), as a stream's pages.
            table = backend.scan_table(self.queue, state, after, upto, limit=_PAGE, select=select)
            if table is not None:
                return table
            return backend.scan(self.queue, state, after, upto, limit=_PAGE, select=select)

        yield from _batches(
            self.queue, _ahead(_pages(page, partition.after, partition.upto)), self.schema
        )


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
class _Positions:
    """How a position stream reads: by id range of ``source``, its place the queue's pointer."""

    source: str
    """The queue whose messages a range holds: a subscription's topic, or the queue itself."""
    where: str | None
    """Which of them it reads: a subscription's own where and the option's, over ``source``."""
    remove: bool
    """An exclusive stream of a queue deletes what it read; a subscription's passes it."""


def _positions(db: Engine, queue: str, options: Options) -> _Positions | None:
    """How a streaming read of ``queue`` reads by position, or None: by claimed rounds."""
    spec = db.queue(queue).spec
    if spec.kind == "topic":
        raise ConfigurationError(
            f"{queue!r} is a topic: stream a subscription of it (db.subscribe({queue!r}, "
            "'NAME'), then option queue NAME)"
        )
    if spec.kind == "subscription" and spec.topic is not None:
        if options.exclusive is False:
            return None
        where = " AND ".join(f"({w})" for w in (spec.selector, options.where) if w)
        return _Positions(spec.topic, where or None, remove=False)
    if not options.exclusive:
        return None
    if spec.isolation != "none":
        raise ConfigurationError(
            f"option exclusive reads queue {queue!r} by position, which its isolation "
            f"{spec.isolation!r} does not allow (a lane's messages go one at a time): "
            "leave the option out, and the stream takes the queue's messages by rounds"
        )
    return _Positions(queue, options.where, remove=True)


@dataclass(frozen=True)
class _Share(InputPartition):
    session: int
    after: int
    upto: int
    part: int
    parts: int
    span: tuple[int, int] = (0, 0)
    """A position stream's share of its range: the ids (after, upto] of its source."""
    at: float = 0.0
    """When the range was planned: what was due and unexpired then is read."""


def _shares(after: int, upto: int, parts: int) -> list[tuple[int, int]]:
    """(after, upto] cut into ``parts`` consecutive ranges (a range is read by id)."""
    step = -(-(upto - after) // parts) if upto > after else 0
    return [(min(upto, after + k * step), min(upto, after + (k + 1) * step)) for k in range(parts)]


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Options, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.queue = options.need_queue()
        self.name = options.need_name("streaming read")
        self.cutoff: float | None = None
        self.ceiling = NO_CEILING
        self.touched = 0.0
        db = connection(options.url)
        db.selection(self.queue, options.where)
        self.positions = _positions(db, self.queue, options)
        if self.positions is not None:  # checked now, on the driver: not in a task
            db.selection(self.positions.source, self.positions.where)

    def _backend(self) -> Backend:
        return connection(self.options.url).backend

    def initialOffset(self) -> dict[str, Any]:
        # A new checkpoint starts after what the stream acknowledged: rounds it still
        # holds (a previous checkpoint's unfinished batch) come first.
        backend = self._backend()
        acked = backend.open_stream(self.queue, self.name).acked
        if self.positions is None:
            return {"round": acked}
        return _offset(acked, backend.stream_pointer(self.queue), 0)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        # "Available now": what was enqueued before this moment, not what comes later.
        db = connection(self.options.url)
        self.cutoff = db.clock.now()  # enqueued_at's clock
        if self.positions is not None:  # ids follow commit order: the last one is the bound
            pointer = db.backend.stream_pointer(self.queue)
            last = db.backend.stream_last(self.positions.source, pointer)
            self.ceiling = pointer if last is None else last

    def _cap(self, limit: ReadLimit | None) -> int:
        if isinstance(limit, ReadAllAvailable):
            return 2**62
        if isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        return self.options.max_per_batch

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        db = connection(self.options.url)
        if self.positions is not None:
            return self._latest_position(db, self.positions, start, self._cap(limit))
        backend = db.backend
        stream = backend.open_stream(self.queue, self.name)
        if start is not None:
            # Spark plans batch N+1 only once batch N is committed: what ends at
            # start is done, and acknowledging it now leaves nothing held in idle times.
            self._acknowledge(db, stream, start)
        base = stream.acked if start is None else start["round"]
        cap = self._cap(limit)
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

    def _latest_position(
        self, db: Engine, positions: _Positions, start: dict[str, Any] | None, cap: int
    ) -> dict[str, Any]:
        """The next batch of a position stream: rounds of what lies behind, then a range.

        Messages behind the position are taken by claimed rounds, as a stream without
        positions takes all: a subscription's own rows (pulled by a consumer before the
        stream began), and in a queue messages that came back behind it (a release, or
        on SQLite an id used again after the queue's last message went). The offset holds
        the round, the position and when the range was planned (``at``): the batch
        (start, end] is the rounds between and the range's messages due and unexpired at
        end's ``at``, the same rows whenever it is read.
        """
        backend = db.backend
        stream = backend.open_stream(self.queue, self.name)
        if start is None:
            start = _offset(stream.acked, backend.stream_pointer(self.queue), 0)
            pointer = start["position"]
        else:
            pointer = self._acknowledge(db, stream, start)
        base_round, base = start["round"], start.get("position")
        if base is None:  # a checkpoint of this stream from before it read by position
            return _offset(base_round, pointer, 0)
        if pointer > base:
            raise QueueInUse(
                f"{self.queue!r} has moved past what streaming read {self.name!r} has read "
                f"(position {pointer}, the query's {base}): a stream that reads by position "
                "must be its only consumer, and one query with one checkpoint; with other "
                "consumers, use option exclusive=false"
            )
        held = backend.stream_held_count(stream.session, self.queue, base_round, stream.round)
        round_ = max(stream.round, base_round) if held else base_round
        # The range's time travels in the offset as whole microseconds: a JSON integer
        # reads back exactly, wherever Spark keeps it.
        micros = round(db.clock.now() * 1_000_000)
        room, position, now = cap - held, base, micros / 1_000_000
        if room > 0 and not positions.remove:  # a subscription's own rows: the older ones
            taken = self._take_behind(db, stream.session, stream.round + 1, None, room)
            room -= taken
            round_ = stream.round + 1 if taken else round_
        if room > 0:
            select = db.selection(positions.source, positions.where)
            position, found = backend.stream_span(
                positions.source, base, limit=room, ceiling=self.ceiling, now=now, select=select
            )
            # Caught up: what came back behind an exclusive stream's position goes by a round.
            behind = positions.remove and found < room
            if behind and self._take_behind(
                db, stream.session, stream.round + 1, base, room - found
            ):
                round_ = stream.round + 1
        if round_ == base_round and position == base:
            return start
        return _offset(round_, position, micros)

    def _take_behind(self, db: Engine, session: int, round_: int, upto: int | None, n: int) -> int:
        """Take up to ``n`` messages behind position ``upto`` (None: all) as ``round_``."""
        select = db.selection(self.queue, self.options.where)
        if not db.backend.stream_behind(self.queue, upto, limit=n, select=select):
            return 0
        taken = self._claim(db, session, round_, n)
        if taken:
            db.backend.set_stream_round(session, round_)
        return taken

    def _claim(self, db: Engine, session: int, round_: int, wanted: int) -> int:
        """Claim up to ``wanted`` messages for ``round_``; how many it took."""
        where = self.options.where
        if self.cutoff is not None:
            bound = f"enqueued_at <= {self.cutoff!r}"
            where = f"({where}) AND {bound}" if where else bound
        select = db.selection(self.queue, where)
        spec = db.queue(self.queue).spec
        lanes = spec.isolation != "none"
        taken = 0
        while taken < wanted:
            chunk = min(_CLAIM_CHUNK, wanted - taken)
            if spec.kind == "subscription" and self.positions is None:
                before_take(db.context, spec)  # its topic's next messages, up to its window
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

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        after, upto = start["round"], end["round"]
        first, last = start.get("position"), end.get("position")
        span = (0, 0) if first is None or last is None else (first, last)
        if upto <= after and span[1] <= span[0]:
            return []
        session = self._backend().open_stream(self.queue, self.name).session
        parts = self.options.partitions or 1
        at = _seconds(end)
        return [
            _Share(session, after, upto, k, parts, piece, at)
            for k, piece in enumerate(_shares(span[0], span[1], parts))
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Share)
        db, p = connection(self.options.url), partition
        backend = db.backend
        if p.upto > p.after:
            share = {"part": p.part, "parts": p.parts}
            held = backend.stream_held(
                p.session, self.queue, p.after, p.upto, spooled=False, **share
            )
            yield from to_batches(self.queue, held, self.schema)
            for table in backend.stream_spooled(p.session, p.after, p.upto, **share):
                yield from table_batches(self.queue, table, self.schema)
        if self.positions is not None:
            source = self.positions.source
            select = db.selection(source, self.positions.where)
            pages = _range_pages(backend, source, *p.span, at=p.at, select=select)
            yield from _batches(self.queue, _ahead(pages), self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        db = connection(self.options.url)
        self._acknowledge(db, db.backend.open_stream(self.queue, self.name), end)

    def _acknowledge(self, db: Engine, stream: StreamState, upto: dict[str, Any]) -> int:
        """Settle what the batches up to ``upto`` took: Spark has committed them.

        Their rounds are settled, and a position stream's pointer moves to ``upto``'s
        position (an exclusive stream deleting what its ranges read). Returns the
        pointer now (0 for a stream without positions).
        """
        backend, positions = db.backend, self.positions
        reached = None
        pointer = 0
        if positions is not None:
            pointer = backend.stream_pointer(self.queue)
            # An idle subscription's stream still marks it as used, now and then.
            touch = not positions.remove and time.monotonic() - self.touched >= TOUCH_EVERY
            position = upto.get("position", pointer)
            if position > pointer or (touch and position == pointer):
                select = db.selection(positions.source, positions.where)
                at = _seconds(upto)
                reached = Reached(position, at, positions.remove, select)
                pointer = position
        if upto["round"] > stream.acked or reached is not None:
            backend.stream_settle(
                stream.session, self.queue, stream.acked, upto["round"], reached=reached
            )
            self.touched = time.monotonic()
        return pointer


def _offset(round_: int, position: int, at: int) -> dict[str, int]:
    """A position stream's offset (a stream without positions has only the round):
    ``at`` in microseconds of the clock messages are judged by."""
    return {"round": round_, "position": position, "at": at}


def _seconds(offset: dict[str, Any]) -> float:
    """When an offset's range was planned, in seconds (as ``_latest_position`` had it)."""
    return int(offset.get("at", 0)) / 1_000_000
