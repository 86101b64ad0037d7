"""A Python data source with no database behind it: Spark's own floor for a Python source.

Its reads yield Arrow batches built once per worker, of a sluice read's schema with
bodies as long as the benchmark's: what Spark costs to start a query, move Python's
Arrow batches into the JVM and write them to ``noop``, with nothing to fetch or convert.
A streaming read moves an offset by ``max_per_batch`` up to ``rows``.
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
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from sluice.spark.rows import BATCH_ROWS, message_ddl

__all__ = ["FloorSource"]

_cache: dict[tuple[str, int], pa.RecordBatch] = {}


def _batch(schema: StructType, body_bytes: int) -> pa.RecordBatch:
    """BATCH_ROWS messages of ``schema``: JSON bodies of ``body_bytes``, times set."""
    key = (schema.json(), body_bytes)
    found = _cache.get(key)
    if found is None:
        n = BATCH_ROWS
        arrow = pa.schema(
            [pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC")) for f in schema.fields]
        )
        body = '{"note": "' + "x" * max(body_bytes - 12, 0) + '"}'
        values: dict[str, Any] = {
            "id": [f"1/1/{i}" for i in range(n)],
            "queue": ["floor"] * n,
            "priority": [0] * n,
            "body": [body] * n,
            "properties": [[]] * n,
            "content_type": ["application/json"] * n,
            "attempts": [0] * n,
            "enqueued_at": [1_700_000_000_000_000] * n,
            "available_at": [1_700_000_000_000_000] * n,
        }
        arrays = [pa.array(values.get(f.name, [None] * n), type=f.type) for f in arrow]
        found = _cache[key] = pa.RecordBatch.from_arrays(arrays, schema=arrow)
    return found


@dataclass(frozen=True)
class _Part(InputPartition):
    rows: int


def _read(schema: StructType, body_bytes: int, rows: int) -> Iterator[pa.RecordBatch]:
    batch = _batch(schema, body_bytes)
    while rows > 0:
        yield batch if rows >= batch.num_rows else batch.slice(0, rows)
        rows -= batch.num_rows


def _parts(rows: int, parts: int) -> list[InputPartition]:
    return [_Part(rows // parts + (1 if k < rows % parts else 0)) for k in range(parts)]


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options, self.schema = options, schema

    def partitions(self) -> Sequence[InputPartition]:
        return _parts(int(self.options["rows"]), int(self.options.get("partitions", "2")))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Part)
        yield from _read(self.schema, int(self.options["body_bytes"]), partition.rows)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options, self.schema = options, schema

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802  (Spark's name)
        """Everything is available at once: batches of max_per_batch, as sluice's."""

    def initialOffset(self) -> dict[str, int]:  # noqa: N802  (Spark's name)
        return {"n": 0}

    def latestOffset(  # noqa: N802  (Spark's name)
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        base = 0 if start is None else start["n"]
        step = int(self.options["max_per_batch"])
        return {"n": min(int(self.options["rows"]), base + step)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        n = end["n"] - start["n"]
        return _parts(n, int(self.options.get("partitions", "1"))) if n > 0 else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Part)
        yield from _read(self.schema, int(self.options["body_bytes"]), partition.rows)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to acknowledge."""


class FloorSource(DataSource):
    """``format("sluice_floor")``: options rows, body_bytes, partitions, max_per_batch."""

    @classmethod
    def name(cls) -> str:
        return "sluice_floor"

    def schema(self) -> str:
        return message_ddl(None)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802  (Spark's name)
        return _StreamReader(dict(self.options), schema)
