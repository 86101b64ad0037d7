"""Messages as Spark rows: the DataFrame schema, stored rows to Arrow batches, and back.

A read yields Arrow record batches (no per-row pickling between the Python
worker and the JVM). A body parsed by a ``body_schema`` is coerced field by
field the way Spark's ``from_json`` reads permissively: a value that does not
fit its field's type becomes NULL rather than failing the query.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from sluice.backends.base import MESSAGE_COLUMNS, READ_COLUMNS, HeldRow, MessageRow, Row
from sluice.backends.records import held_row
from sluice.errors import ConfigurationError
from sluice.message import decode_json, is_json

__all__ = [
    "BATCH_ROWS",
    "MESSAGE_FIELDS",
    "message_ddl",
    "read_batches",
    "read_table_batches",
    "table_batches",
    "to_batches",
]

BATCH_ROWS: Final = 8192
"""Rows per Arrow batch a read yields."""

MESSAGE_FIELDS: Final = (
    ("id", "STRING"),
    ("queue", "STRING"),
    ("priority", "BIGINT"),
    ("body", "STRING"),
    ("properties", "MAP<STRING, STRING>"),
    ("content_type", "STRING"),
    ("type", "STRING"),
    ("group", "STRING"),
    ("correlation_id", "STRING"),
    ("reply_to", "STRING"),
    ("attempts", "INT"),
    ("enqueued_at", "TIMESTAMP"),
    ("available_at", "TIMESTAMP"),
    ("expires_at", "TIMESTAMP"),
)
"""The columns of a read, in order; ``body`` is a struct instead with a body schema."""

_TIMES: Final = ("enqueued_at", "available_at", "expires_at")
_ID_PARTS: Final = ("p_session", "p_tx", "p_num")
_TEXT: Final = pa.string()

_INTEGER_RANGES: Final[dict[type[DataType], int]] = {
    ByteType: 2**7,
    ShortType: 2**15,
    IntegerType: 2**31,
    LongType: 2**63,
}


def message_ddl(body_schema: str | None) -> str:
    """The DDL of a read's rows: the message columns, the body parsed when asked."""
    columns = []
    for name, kind in MESSAGE_FIELDS:
        spelled = f"STRUCT<{body_schema}>" if name == "body" and body_schema else kind
        columns.append(f"`{name}` {spelled}")
    return ", ".join(columns)


def to_batches(
    queue: str, rows: Sequence[MessageRow | HeldRow], schema: StructType
) -> Iterator[pa.RecordBatch]:
    """Stored message rows as Arrow batches of ``schema``."""
    arrow = _arrow(schema)
    for start in range(0, len(rows), BATCH_ROWS):
        chunk = rows[start : start + BATCH_ROWS]
        columns = dict(zip(MESSAGE_COLUMNS, zip(*chunk, strict=False), strict=False))
        ids = (pc.cast(pa.array(columns[k], pa.int64()), _TEXT) for k in _ID_PARTS)
        ids_text = pc.binary_join_element_wise(*ids, "/")
        yield _batch(queue, columns, ids_text, arrow, schema["body"].dataType)


def read_batches(queue: str, rows: Sequence[Row], schema: StructType) -> Iterator[pa.RecordBatch]:
    """A Spark read's rows (READ_COLUMNS: ``scan``, ``stream_rows``) as Arrow batches."""
    arrow = _arrow(schema)
    for start in range(0, len(rows), BATCH_ROWS):
        columns = dict(
            zip(READ_COLUMNS, zip(*rows[start : start + BATCH_ROWS], strict=True), strict=True)
        )
        ids = pa.array(columns["message_id"], _TEXT)
        yield _batch(queue, columns, ids, arrow, schema["body"].dataType)


def _arrow(schema: StructType) -> pa.Schema:
    return pa.schema(
        [pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC"), True) for f in schema.fields]
    )


def _batch(
    queue: str, c: Mapping[str, Sequence[Any]], ids: pa.Array, arrow: pa.Schema, body_type: DataType
) -> pa.RecordBatch:
    """One batch from columns of stored values (``c``, by column name).

    Column by column: the rows were turned into columns in C (``zip``), and Arrow
    builds and converts them; Python touches a message only for what Arrow cannot
    do (a body schema, a binary body, properties).
    """
    n = len(ids)
    bodies: Any = c["body"]
    binary = c.get("body_bytes")
    if binary is not None and binary.count(None) < n:  # one column again
        bodies = [text if raw is None else raw for text, raw in zip(bodies, binary, strict=True)]
    if isinstance(body_type, StructType):
        bodies = [
            _parsed_body(b, t, body_type) for b, t in zip(bodies, c["content_type"], strict=True)
        ]
    elif bytes in set(map(type, bodies)):  # (a scan in C: most reads have no binary body)
        bodies = [_body_text(b) for b in bodies]
    if any(c["properties"]):
        properties: Any = [_properties(p) for p in c["properties"]]
    else:
        properties = [[]] * n
    columns = [
        ids,
        pa.array([queue] * n, _TEXT),
        c["priority"],
        bodies,
        properties,
        c["content_type"],
        c["type"],
        c["grp"],
        c["correlation_id"],
        c["reply_to"],
        c["attempts"],
        *(_timestamps(pa.array(c[k], pa.float64())) for k in _TIMES),
    ]
    arrays = [
        v if isinstance(v, pa.Array) else pa.array(v, type=field.type)
        for v, field in zip(columns, arrow, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow)


def table_batches(queue: str, table: pa.Table, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Messages as an Arrow table (MESSAGE_COLUMNS, ``body_bytes`` as hex text) as batches.

    Column by column in Arrow, without a Python object per message, when bodies are
    text and not parsed; otherwise through the rows of ``to_batches``.
    """
    n = table.num_rows
    if isinstance(schema["body"].dataType, StructType) or table["body_bytes"].null_count < n:
        # Imported here: only a PostgreSQL read has a spool, and psycopg is another extra.
        from sluice.backends.postgres_spool import spooled_rows  # noqa: PLC0415

        yield from to_batches(queue, [held_row(r) for r in spooled_rows(table)], schema)
        return
    ids = [pc.cast(table[c], _TEXT) for c in _ID_PARTS]
    yield from _columns(queue, pc.binary_join_element_wise(*ids, "/"), table, schema)


def read_table_batches(queue: str, table: pa.Table, schema: StructType) -> Iterator[pa.RecordBatch]:
    """A Spark read's rows as an Arrow table (READ_COLUMNS, ``body_bytes`` binary:
    ``Streams.stream_table``) as batches of ``schema``.

    Column by column, as ``table_batches``; a body schema or a binary body goes through
    the rows of ``read_batches``, which know how to parse and spell them.
    """
    n = table.num_rows
    if not n:
        return
    if isinstance(schema["body"].dataType, StructType) or table["body_bytes"].null_count < n:
        columns = [table[c].to_pylist() for c in READ_COLUMNS]
        yield from read_batches(queue, list(zip(*columns, strict=True)), schema)
        return
    yield from _columns(queue, table["message_id"], table, schema)


def _columns(queue: str, ids: Any, table: pa.Table, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Batches of ``schema`` from a table of stored columns whose bodies are all text."""
    n = table.num_rows
    arrow = _arrow(schema)
    stored = table["properties"]
    if stored.null_count == n:
        properties: Any = pa.array([[]] * n, type=arrow.field("properties").type)
    else:
        properties = pa.array(
            [_properties(p) for p in stored.to_pylist()], type=arrow.field("properties").type
        )
    columns = [
        ids,
        pa.array([queue] * n, _TEXT),
        table["priority"],
        table["body"],
        properties,
        table["content_type"],
        table["type"],
        table["grp"],
        table["correlation_id"],
        table["reply_to"],
        table["attempts"],
        *(_timestamps(table[c]) for c in _TIMES),
    ]
    arrays = [pc.cast(c, f.type) for c, f in zip(columns, arrow, strict=True)]
    yield from pa.Table.from_arrays(arrays, schema=arrow).to_batches(max_chunksize=BATCH_ROWS)


def _timestamps(seconds: Any) -> Any:
    micros = pc.cast(pc.round(pc.multiply(seconds, 1_000_000)), pa.int64())
    return pc.cast(micros, pa.timestamp("us", tz="UTC"))


def _body_text(stored: str | bytes | None) -> str | None:
    """The body as text: JSON and other text as stored, binary as base64."""
    if stored is None or isinstance(stored, str):
        return stored
    return base64.b64encode(stored).decode("ascii")


def _parsed_body(
    stored: str | bytes | None, content_type: str, schema: StructType
) -> dict[str, Any] | None:
    if stored is None or not is_json(content_type):
        return None
    try:
        value = decode_json(stored)
    except Exception:  # stored JSON was checked at enqueue; be permissive all the same
        return None
    coerced = _coerce(value, schema)
    return coerced if isinstance(coerced, dict) else None


def _coerce(value: Any, kind: DataType) -> Any:  # noqa: PLR0911, PLR0912  (one case per type)
    """``value`` (decoded JSON) as ``kind`` holds it, or None where it does not fit."""
    if value is None:
        return None
    if isinstance(kind, StructType):
        if not isinstance(value, dict):
            return None
        return {f.name: _coerce(value.get(f.name), f.dataType) for f in kind.fields}
    if isinstance(kind, ArrayType):
        if not isinstance(value, list):
            return None
        return [_coerce(v, kind.elementType) for v in value]
    if isinstance(kind, MapType):
        if not isinstance(value, dict) or not isinstance(kind.keyType, StringType):
            return None
        return [(k, _coerce(v, kind.valueType)) for k, v in value.items()]
    if isinstance(kind, StringType):
        if isinstance(value, str):
            return value
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if isinstance(kind, BooleanType):
        return value if isinstance(value, bool) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    bound = _INTEGER_RANGES.get(type(kind))
    if bound is not None:
        if isinstance(value, float) and not value.is_integer():
            return None
        return int(value) if -bound <= value < bound else None
    if isinstance(kind, DoubleType | FloatType):
        number = float(value)
        return number if math.isfinite(number) or isinstance(kind, DoubleType) else None
    raise ConfigurationError(
        f"body_schema type {kind.simpleString()} is not supported; use STRING, BOOLEAN, "
        "TINYINT to BIGINT, FLOAT, DOUBLE, ARRAY, MAP<STRING, ...> and STRUCT"
    )


def _properties(stored: str | None) -> list[tuple[str, str]] | None:
    if not stored:
        return []
    values = decode_json(stored)
    return [
        (k, v if isinstance(v, str) else json.dumps(v, separators=(",", ":")))
        for k, v in values.items()
    ]
