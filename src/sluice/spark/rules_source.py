"""The ``sluice_rules`` Spark data source: the queues of a rules application as one stream,
and the kept messages of a queue as a batch read (what ``queue('q')`` reads).

The stream reads by position, as a subscription's stream does (docs/spark.md): ids in a
queue follow commit order, so an offset is, per queue, the id up to which messages are
in the batch, plus when the batch was planned (``at``, whole microseconds, so that a
replayed batch is evaluated at the same time and its echo messages come due alike).
Nothing is acknowledged here: the rules engine marks a batch's messages processed in the
same database transaction as their actions and the batch's record
(sluice.spark.rules), so the source's commit has nothing to do. A batch reads every
message of a queue still unprocessed and due at ``at`` up to its position, so an echo
message come due, or a message that came back behind the position, is read by the next
batch; ``latestOffset`` plans one whenever there is such work.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from sluice.backends.stream_positions import NO_CEILING
from sluice.errors import ConfigurationError
from sluice.message import is_json, is_xml
from sluice.spark.options import connection

__all__ = [
    "KEPT_SCHEMA",
    "MESSAGE_SCHEMA",
    "STREAM_SCHEMA",
    "RulesDataSource",
    "StreamQueue",
    "message_values",
]

MESSAGE_SCHEMA: Final = (
    "priority BIGINT, properties STRING, content_type STRING, body STRING, "
    "body_bytes BINARY, enqueued_at DOUBLE, available_at DOUBLE, expires_at DOUBLE, "
    "attempts INT, type STRING, correlation_id STRING, reply_to STRING"
)
STREAM_SCHEMA: Final = f"queue_id INT, id BIGINT, {MESSAGE_SCHEMA}, at DOUBLE"
"""A stream row: a message of a processed queue, and its batch's time."""
KEPT_SCHEMA: Final = f"id BIGINT, queue STRING, {MESSAGE_SCHEMA}"
"""A kept message as a relation's row sees it (``queue``: its queue's name)."""

_ARROW_MESSAGE: Final = [
    ("priority", pa.int64()),
    ("properties", pa.string()),
    ("content_type", pa.string()),
    ("body", pa.string()),
    ("body_bytes", pa.binary()),
    ("enqueued_at", pa.float64()),
    ("available_at", pa.float64()),
    ("expires_at", pa.float64()),
    ("attempts", pa.int32()),
    ("type", pa.string()),
    ("correlation_id", pa.string()),
    ("reply_to", pa.string()),
]
STREAM_ARROW: Final = pa.schema(
    [("queue_id", pa.int32()), ("id", pa.int64()), *_ARROW_MESSAGE, ("at", pa.float64())]
)
KEPT_ARROW: Final = pa.schema([("id", pa.int64()), ("queue", pa.string()), *_ARROW_MESSAGE])


@dataclass(frozen=True, slots=True)
class StreamQueue:
    """A queue the stream reads: its name, id, and whether it is an echo queue (read to
    the last id: its messages come due in any order)."""

    name: str
    id: int
    echo: bool


def message_values(row: Sequence[Any]) -> list[Any]:
    """A stored message's columns (priority, properties, content type, body text, body
    bytes, times, ...) as the rows above hold them: a body as text where it is text."""
    priority, properties, content_type, text, data, *rest = row
    raw = data if data is not None else text
    if isinstance(raw, memoryview):
        raw = bytes(raw)
    body, binary = (raw, None) if isinstance(raw, str) or raw is None else (None, raw)
    kind = content_type or "application/json"
    if binary is not None and (is_json(kind) or is_xml(kind) or kind.startswith("text/")):
        with contextlib.suppress(UnicodeDecodeError):  # else as bytes, as the database reads it
            body, binary = binary.decode("utf-8"), None
    return [priority, properties, content_type, body, binary, *rest]


class RulesDataSource(DataSource):
    """``format("sluice_rules")``: options ``url``; a stream: ``queues`` (JSON
    [[name, id, echo], ...]), ``max_per_batch``, ``now`` (a fixed time for every batch,
    for tests on a manual clock); a batch read: ``queue_id`` (kept messages)."""

    @classmethod
    def name(cls) -> str:
        return "sluice_rules"

    def schema(self) -> str:
        return KEPT_SCHEMA if "queue_id" in self.options else STREAM_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _KeptReader(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _RulesStream(dict(self.options))


class _KeptReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.url = options["url"]
        self.queue_id = int(options["queue_id"])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rows = connection(self.url).backend.rules_read(
            "rules_kept_rows", {"queue_id": self.queue_id}
        )
        values = [[r[0], r[1], *message_values(r[2:])] for r in rows]
        yield _batch(values, KEPT_ARROW)


@dataclass(frozen=True)
class _Slice(InputPartition):
    queue_id: int
    upto: int
    at: float


class _RulesStream(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.url = options["url"]
        try:
            self.queues = [
                StreamQueue(str(n), int(i), bool(e)) for n, i, e in json.loads(options["queues"])
            ]
            self.cap = int(options.get("max_per_batch", "10000"))
            self.fixed = float(options["now"]) if options.get("now") else None
        except (KeyError, ValueError, TypeError) as exc:
            raise ConfigurationError(f"sluice_rules: bad options ({exc})") from None

    def initialOffset(self) -> dict[str, Any]:
        return {"at": 0, "n": 0, "q": {str(q.id): 0 for q in self.queues}}

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        db = connection(self.url)
        backend = db.backend
        start = start or self.initialOffset()
        micros = round((self.fixed if self.fixed is not None else db.clock.now()) * 1_000_000)
        now = micros / 1_000_000
        positions: dict[str, int] = {}
        work = False
        for queue in self.queues:
            before = int(start["q"].get(str(queue.id), 0))
            if queue.echo:
                last = backend.stream_last(queue.name, before)
                after = before if last is None else last
            else:
                after, _ = backend.stream_span(
                    queue.name, before, limit=self.cap, ceiling=NO_CEILING, now=now, select=None
                )
            positions[str(queue.id)] = after
            behind = backend.rules_read(
                "rules_stream_behind", {"queue_id": queue.id, "upto": after, "now": now}
            )
            work = work or bool(behind)
        if not work:
            return start
        return {"at": micros, "n": int(start["n"]) + 1, "q": positions}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if start == end:
            return []
        at = int(end["at"]) / 1_000_000
        return [_Slice(int(q), int(upto), at) for q, upto in end["q"].items()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Slice)
        params = {"queue_id": partition.queue_id, "upto": partition.upto, "now": partition.at}
        rows = connection(self.url).backend.rules_read("rules_stream_rows", params)
        values = [[partition.queue_id, r[0], *message_values(r[1:]), partition.at] for r in rows]
        yield _batch(values, STREAM_ARROW)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing: a batch's messages were marked processed with its actions."""


def _batch(values: list[list[Any]], schema: pa.Schema) -> pa.RecordBatch:
    columns: list[Sequence[Any]] = list(zip(*values, strict=True)) if values else [[]] * len(schema)
    return pa.RecordBatch.from_arrays(
        [pa.array(list(c), f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )
