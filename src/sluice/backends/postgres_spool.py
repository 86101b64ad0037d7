"""A Spark stream's spool on PostgreSQL: the messages a round took, as one compressed blob.

Claiming a round by UPDATE rewrote every 1 KB row and its index entries (about
20 microseconds a message here, where a DELETE costs 2). So a stream on a queue
without lanes takes its round by moving it: one statement deletes the messages
and streams them out as CSV (``COPY (DELETE ... RETURNING ...)``); Arrow parses
them in C and writes them as an LZ4-compressed IPC stream, stored in
``stream_spool`` in the same transaction. The round's rows are thus exactly the
blob: a restart reads the same bytes, acknowledging deletes the blob, and
dropping the stream puts the rows back with every column as it was.

Every column of the table travels, so a message restored is the message taken.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from pyarrow import ipc

from sluice.backends.base import MESSAGE_COLUMNS, Row
from sluice.backends.postgres_schema import MESSAGES_TABLE
from sluice.message import MessageState

__all__ = [
    "SPOOL_COLUMNS",
    "first_id",
    "kept_rows",
    "pack",
    "parse_csv",
    "readable",
    "restore_rows",
    "spooled_rows",
    "unpack",
]

_ARROW: Final = {"int": pa.int64(), "float": pa.float64(), "text": pa.string()}
# A bytea travels as CSV spells it, as text (\x and hex digits).
_TYPES: Final = tuple((name, _ARROW.get(kind, pa.string())) for name, kind in MESSAGES_TABLE)

SPOOL_COLUMNS: Final = tuple(name for name, _ in MESSAGES_TABLE)

_SCHEMA: Final = pa.schema([pa.field(name, kind) for name, kind in _TYPES])
_READ: Final = pa_csv.ReadOptions(column_names=list(SPOOL_COLUMNS))
# Text bodies may hold newlines; PostgreSQL's CSV spells NULL as an unquoted empty
# field and the empty string as "": Arrow tells them apart the same way.
_PARSE: Final = pa_csv.ParseOptions(newlines_in_values=True)
_CONVERT: Final = pa_csv.ConvertOptions(
    column_types=dict(_TYPES), strings_can_be_null=True, quoted_strings_can_be_null=False
)
_WRITE: Final = ipc.IpcWriteOptions(compression="lz4")


def parse_csv(data: bytes) -> pa.Table:
    """``COPY ... TO STDOUT (FORMAT csv)`` of SPOOL_COLUMNS as an Arrow table."""
    return pa_csv.read_csv(
        io.BytesIO(data), read_options=_READ, parse_options=_PARSE, convert_options=_CONVERT
    )


def first_id(table: pa.Table) -> int:
    return int(pc.min(table["id"]).as_py())


def pack(table: pa.Table) -> bytes:
    """The table as an LZ4-compressed Arrow IPC stream (what ``stream_spool.data`` holds)."""
    sink = io.BytesIO()
    with ipc.new_stream(sink, _SCHEMA, options=_WRITE) as writer:
        writer.write_table(table)
    return sink.getvalue()


def unpack(data: bytes) -> pa.Table:
    return ipc.open_stream(data).read_all()


def readable(data: bytes, round_: int, part: int, parts: int) -> pa.Table:
    """A spooled round as the rows of a read: id modulo ``parts`` = ``part``.

    The MESSAGE_COLUMNS, ``body_bytes`` and ``round``, with the content type spelled
    out (the schema stores application/json as NULL).
    """
    table = unpack(data)
    if parts > 1:
        # id modulo parts (Arrow has no modulo; integer division truncates, ids are > 0)
        ids = table["id"]
        rest = pc.subtract(ids, pc.multiply(pc.divide(ids, parts), parts))
        table = table.filter(pc.equal(rest, part))
    columns = {name: table[name] for name in (*MESSAGE_COLUMNS, "body_bytes")}
    columns["content_type"] = pc.fill_null(columns["content_type"], "application/json")
    columns["round"] = pa.chunked_array([pa.array([round_] * table.num_rows, pa.int64())])
    return pa.table(columns)


def spooled_rows(table: pa.Table) -> list[Row]:
    """A ``readable`` table's rows in MESSAGE_COLUMNS order, then the round."""
    columns = {name: table[name].to_pylist() for name in (*MESSAGE_COLUMNS, "body_bytes")}
    binary = columns.pop("body_bytes")
    columns["body"] = [
        body if raw is None else _unhex(raw)
        for body, raw in zip(columns["body"], binary, strict=True)
    ]
    columns["round"] = table["round"].to_pylist()
    return list(zip(*(columns[c] for c in (*MESSAGE_COLUMNS, "round")), strict=True))


def restore_rows(table: pa.Table, session: int, round_: int) -> Iterator[tuple[object, ...]]:
    """The spooled rows for ``COPY messages FROM STDIN``, as held by ``session`` in ``round_``.

    Back as claimed messages of the stream's session, they are given back the way any
    closed session's claims are (attempts counted, lanes' heads kept).
    """
    yield from _rows(table, state=int(MessageState.CLAIMED), c_session=session, c_tx=round_)


def kept_rows(table: pa.Table, settled_at: float) -> Iterator[tuple[object, ...]]:
    """The spooled rows for ``COPY messages FROM STDIN``, as done messages (a queue with
    retention keeps what a stream settles)."""
    yield from _rows(
        table, state=int(MessageState.DONE), c_session=None, c_tx=None, settled_at=settled_at
    )


def _rows(table: pa.Table, **fixed: object) -> Iterator[tuple[object, ...]]:
    """The table's rows in SPOOL_COLUMNS order, bodies unhexed, with ``fixed`` columns set."""
    columns: dict[str, list[object]] = {name: table[name].to_pylist() for name in SPOOL_COLUMNS}
    columns["body_bytes"] = [
        None if raw is None else _unhex(str(raw)) for raw in columns["body_bytes"]
    ]
    for name, value in fixed.items():
        columns[name] = [value] * table.num_rows
    yield from zip(*columns.values(), strict=True)


def _unhex(spelled: str) -> bytes:
    """A bytea as CSV spells it (``\\x`` and hex digits)."""
    return bytes.fromhex(spelled[2:])
