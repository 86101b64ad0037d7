"""The answers of HTTP requests made with an Idempotency-Key, in the SQL backends
(sluice.server.idempotency; SQL in idempotency.sql)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from sluice.backends.records import IdempotentRequest, Row

__all__ = ["SqlIdempotency"]


class SqlIdempotency:
    """Idempotency keys for a SQL backend (a mixin; the SQL in idempotency.sql)."""

    @abstractmethod
    def _read_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]: ...

    @abstractmethod
    def _write_rows(self, name: str, params: Mapping[str, Any], *, durable: bool = True) -> int: ...

    def idempotency_claim(
        self, owner: str, key: str, fingerprint: str, now: float, *, durable: bool = True
    ) -> bool:
        params = {"owner": owner, "key": key, "fingerprint": fingerprint, "now": now}
        return self._write_rows("idempotency_claim", params, durable=durable) > 0

    def idempotency_find(self, owner: str, key: str) -> IdempotentRequest | None:
        rows = self._read_rows("idempotency_find", {"owner": owner, "key": key})
        if not rows:
            return None
        fingerprint, status, answer, started_at = rows[0]
        return IdempotentRequest(fingerprint, status, answer, started_at)

    def idempotency_restart(
        self,
        owner: str,
        key: str,
        fingerprint: str,
        *,
        now: float,
        stale: float,
        durable: bool = True,
    ) -> bool:
        params = {"owner": owner, "key": key, "fingerprint": fingerprint, "now": now,
                  "stale": stale}  # fmt: skip
        return self._write_rows("idempotency_restart", params, durable=durable) > 0

    def idempotency_answer(self, owner: str, key: str, status: int, answer: str) -> None:
        params = {"owner": owner, "key": key, "status": status, "answer": answer}
        self._write_rows("idempotency_answer", params)

    def idempotency_forget(self, owner: str, key: str) -> None:
        self._write_rows("idempotency_forget", {"owner": owner, "key": key})

    def idempotency_expire(self, before: float) -> int:
        return self._write_rows("idempotency_expire", {"before": before}, durable=False)
