"""What the SQS-compatible endpoint keeps beyond sluice's catalog, in the SQL backends
(sluice.server.sqs; SQL in sqs.sql): a queue's SQS attributes and tags, and FIFO
deduplication ids (in the idempotency table, written by an enqueue's commit)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from sluice.backends.records import Row, StoredSqsQueue

__all__ = ["SqlSqs", "dedup_owner"]


def dedup_owner(queue: str) -> str:
    """The idempotency table's owner of ``queue``'s deduplication ids."""
    return f"sqs:{queue}"


class SqlSqs:
    """The SQS endpoint's records for a SQL backend (a mixin; the SQL in sqs.sql)."""

    @abstractmethod
    def _read_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]: ...

    @abstractmethod
    def _write_rows(self, name: str, params: Mapping[str, Any], *, durable: bool = True) -> int: ...

    def sqs_queue_find(self, name: str) -> StoredSqsQueue | None:
        rows = self._read_rows("sqs_queue_find", {"name": name})
        if not rows:
            return None
        attributes, tags, created_at, changed_at = rows[0]
        return StoredSqsQueue(attributes, tags, created_at, changed_at)

    def sqs_queue_put(self, name: str, attributes: str, tags: str, now: float) -> None:
        params = {"name": name, "attributes": attributes, "tags": tags, "now": now}
        self._write_rows("sqs_queue_put", params)

    def sqs_queue_add(self, name: str, attributes: str, tags: str, now: float) -> bool:
        params = {"name": name, "attributes": attributes, "tags": tags, "now": now}
        return self._write_rows("sqs_queue_add", params) == 1

    def sqs_dedup_find(self, queue: str, dedup: str, since: float) -> str | None:
        params = {"owner": dedup_owner(queue), "key": dedup, "since": since}
        rows = self._read_rows("sqs_dedup_find", params)
        return str(rows[0][0]) if rows else None
