"""Gateway queues in the SQL backends (sluice.gateways; SQL in gateways.sql)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from sluice.backends.records import Row, StoredGateway

__all__ = ["SqlGateways"]


class SqlGateways:
    """Gateway definitions for a SQL backend (a mixin; the SQL in gateways.sql)."""

    @abstractmethod
    def _read_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]: ...

    @abstractmethod
    def _write_rows(self, name: str, params: Mapping[str, Any], *, durable: bool = True) -> int: ...

    def gateways_put(
        self, queue: str, direction: str, transport: str, settings: str, now: float
    ) -> None:
        params = {"queue": queue, "direction": direction, "transport": transport,
                  "settings": settings, "now": now}  # fmt: skip
        self._write_rows("gateways_put", params)

    def gateways_list(self) -> list[StoredGateway]:
        return [
            StoredGateway(str(q), str(d), str(t), str(s), float(at))
            for q, d, t, s, at in self._read_rows("gateways_list", {})
        ]

    def gateways_drop(self, queue: str) -> bool:
        return self._write_rows("gateways_drop", {"queue": queue}) > 0
