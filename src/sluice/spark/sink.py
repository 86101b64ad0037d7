"""The ``sluice`` Spark sink: batch and streaming write = enqueue, all or nothing.

Each task stages its rows as pending messages of a session of its own (a
*staging session*: no process behind it, a lease of ``staging_timeout``), and
reports (session, transaction, count) to the driver. The driver's ``commit``
publishes every task's rows in one database transaction and, for a stream,
records the micro-batch id with them, so a replayed batch publishes nothing
twice.

``abort`` must drop the rows of tasks Spark did not report too: a failed job
is aborted while its other tasks may still run. So a batch write labels all
its sessions with one write id (``write_host``), the driver's own *write
session* among them; ``abort`` closes every session with that label. A task
checks that the write session still lives after it opened its session and
after it staged, and otherwise closes its session itself. Rows a task flushes
between the abort and that check belong to no session: the task's own close
(or anyone's recovery) drops them. A task killed before it reported leaves a
session nobody will publish: when its lease runs out, any sluice process's
recovery drops its rows as it does a crashed producer's. A stream's sessions
are labelled by sink and batch id instead (``sink_host``): aborting a batch
ends all of that batch's, and publishing batch N ends every older one left.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from sluice.backends.records import StagedPart, sink_host, write_host
from sluice.engine.database import Engine
from sluice.engine.transaction import Transaction
from sluice.errors import ConfigurationError, InvalidBody, LeaseLost, MessageError
from sluice.message import decode_json, encode_json
from sluice.spark.options import Options, connection

__all__ = ["BatchWriter", "StreamWriter"]

_FIELDS: Final = frozenset(
    {"queue", "body", "priority", "properties", "type", "group", "correlation_id", "reply_to"}
)
_BATCH_ID: Final = "streaming.sql.batchId"
"""The local property Spark's micro-batch execution gives every task of a batch."""
_FLUSH_ROWS: Final = 5000
"""Rows a task buffers before writing them to its staging session."""


@dataclass(frozen=True)
class Staged(WriterCommitMessage):
    """What one task staged (empty tasks report none)."""

    part: StagedPart | None


def _check_columns(options: Options, schema: StructType) -> None:
    names = set(schema.names)
    unknown = sorted(names - _FIELDS)
    if unknown:
        raise ConfigurationError(
            f"column(s) {', '.join(unknown)} are not message fields; a row to enqueue has "
            f"{', '.join(sorted(_FIELDS))} (body required; queue or option queue)"
        )
    if "body" not in names:
        raise ConfigurationError("a row to enqueue needs a body column (a struct or JSON text)")
    if "queue" not in names:
        options.need_queue()


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("sluice")``: every row becomes a message, all published at once.

    Rows arrive as Arrow batches, as Spark hands them to Python anyway: turning
    them into Spark Row objects first would cost more than staging them.
    """

    def __init__(self, options: Options, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ConfigurationError(
                "format('sluice') only appends messages: use mode('append'), not overwrite"
            )
        _check_columns(options, schema)
        self.options = options
        self.body_type = schema["body"].dataType
        self.body_maps = _has_map(self.body_type)
        self.host, self.write_session = self._open_write()

    def _open_write(self) -> tuple[str, int | None]:
        """The label of this write's sessions, and the driver's write session (streams: none)."""
        host = write_host(uuid.uuid4().hex)
        db = connection(self.options.url)
        return host, db.backend.open_session(host, -1, self.options.staging_timeout)

    def _staging_session(self, db: Engine, context: TaskContext | None) -> int:
        partition = context.partitionId() if context else 0
        return db.backend.open_session(self.host, partition, self.options.staging_timeout)

    def _check_write(self, db: Engine) -> None:
        """Raise LeaseLost if the write was aborted (or its lease ran out): its rows are void.

        The heartbeat also keeps the write session alive while tasks work.
        """
        if self.write_session is not None and not db.backend.heartbeat(self.write_session):
            raise LeaseLost("the batch write was aborted (a task failed): this task's rows go")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        db = connection(self.options.url)
        session = self._staging_session(db, TaskContext.get())
        try:
            self._check_write(db)
            tx = Transaction(db.context, owner=(session, 1))
            for batch in iterator:
                for start in range(0, batch.num_rows, _FLUSH_ROWS):
                    self._enqueue_rows(tx, batch.slice(start, _FLUSH_ROWS).to_pylist())
                    tx.flush()
            part = tx.stage()
            self._check_write(db)
        except BaseException:
            db.backend.close_session(session)  # drops whatever was staged
            raise
        if part.rows == 0:
            db.backend.close_session(session)
            return Staged(None)
        return Staged(part)

    def _enqueue_rows(self, tx: Transaction, rows: list[dict[str, Any]]) -> None:
        """Enqueue in row order; a run of rows with the same options is one call."""
        run: list[Any] = []
        run_key: tuple[str, str] | None = None
        run_options: dict[str, Any] = {}
        for fields in rows:
            queue, body, options = self._message(fields)
            key = (queue, encode_json(options)) if options else (queue, "")
            if key != run_key:
                if run_key is not None:
                    tx.enqueue_many(run_key[0], run, **run_options)
                run, run_key, run_options = [], key, options
            run.append(body)
        if run_key is not None:
            tx.enqueue_many(run_key[0], run, **run_options)

    def _message(self, fields: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
        queue = fields.get("queue") or self.options.queue
        if not queue:
            raise MessageError("a row has no queue (a NULL queue column and no option queue)")
        body = fields["body"]
        if self.body_maps:
            body = _unmap(body, self.body_type)
        if isinstance(body, str):
            try:
                body = decode_json(body)
            except Exception as exc:
                raise InvalidBody(
                    f"a body column's text is not JSON ({exc}): {body[:80]!r}"
                ) from exc
        options: dict[str, Any] = {
            key: fields[key]
            for key in ("priority", "type", "group", "correlation_id", "reply_to")
            if fields.get(key) is not None
        }
        properties = fields.get("properties")
        if isinstance(properties, str):
            properties = decode_json(properties)
        elif isinstance(properties, list):  # a map column: Arrow's (key, value) pairs
            properties = dict(properties)
        if properties:
            options["properties"] = properties
        return queue, body, options

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._publish(messages, None, 0)
        if self.write_session is not None:
            connection(self.options.url).backend.close_session(self.write_session)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # By label, not by the messages: those lack the tasks still running.
        connection(self.options.url).backend.close_staging(self.host)

    def _publish(
        self, messages: list[WriterCommitMessage | None], sink: str | None, batch: int
    ) -> None:
        db = connection(self.options.url)
        # A batch published before (a replayed micro-batch) publishes nothing: this
        # run's copies are dropped with the sink's other orphans.
        db.backend.publish_staged(_parts(messages), sink, batch)
        _fault_point("after_publish")


class StreamWriter(BatchWriter, DataSourceStreamArrowWriter):
    """``writeStream.format("sluice")``: each micro-batch published once, by its batch id."""

    def __init__(self, options: Options, schema: StructType, overwrite: bool) -> None:
        self.sink = options.need_name("streaming write")
        super().__init__(options, schema, overwrite)

    def _open_write(self) -> tuple[str, int | None]:
        # No write session: publishing batch N closes its unreported tasks' sessions.
        return sink_host(self.sink), None

    def _staging_session(self, db: Engine, context: TaskContext | None) -> int:
        # Labelled with the sink and the batch, so publishing batch N closes the
        # sessions of its killed or retried tasks at once (base.sink_host).
        batch = context.getLocalProperty(_BATCH_ID) if context else None
        if batch is None:
            raise ConfigurationError("a streaming write's task does not know its batch id")
        return db.backend.open_session(
            sink_host(self.sink), int(batch), self.options.staging_timeout
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        self._publish(messages, self.sink, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        # The batch's sessions by label, reported or not (a task may still run). One
        # that opens after this waits for the batch's replay to be published.
        connection(self.options.url).backend.close_staging(self.host, batchId)


def _fault_point(point: str) -> None:
    """For exactly-once tests: SLUICE_SPARK_FAULT=<point> kills this process right here.

    ``after_publish``: the sink has published, Spark has not logged the batch as
    committed: the crash the sink's idempotence is for.
    """
    if os.environ.get("SLUICE_SPARK_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _parts(messages: list[WriterCommitMessage | None]) -> list[StagedPart]:
    return [m.part for m in messages if isinstance(m, Staged) and m.part is not None]


def _has_map(kind: DataType) -> bool:
    if isinstance(kind, MapType):
        return True
    if isinstance(kind, StructType):
        return any(_has_map(f.dataType) for f in kind.fields)
    if isinstance(kind, ArrayType):
        return _has_map(kind.elementType)
    return False


def _unmap(value: Any, kind: DataType) -> Any:
    """Arrow gives a map as (key, value) pairs; a body wants it as an object."""
    if value is None:
        return None
    if isinstance(kind, MapType):
        return {k: _unmap(v, kind.valueType) for k, v in value}
    if isinstance(kind, StructType):
        return {f.name: _unmap(value[f.name], f.dataType) for f in kind.fields}
    if isinstance(kind, ArrayType):
        return [_unmap(v, kind.elementType) for v in value]
    return value
