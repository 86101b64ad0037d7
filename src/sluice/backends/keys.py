"""The HTTP server's API keys in the SQL backends (sluice.server.grants; SQL in keys.sql).

The server makes a key's secret and its hash; the store keeps the hash, the grants
as JSON text, the key's times and, for Signature Version 4, the secret encrypted under
the server's signing key (sluice.server.signing), and finds a key by the hash of the secret a
request presents.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from sluice.backends.records import Duplicate, Row, StoredKey
from sluice.errors import ConfigurationError

__all__ = ["SqlKeys"]


class SqlKeys:
    """API keys for a SQL backend (a mixin; the SQL in keys.sql)."""

    @abstractmethod
    def _read_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]: ...

    @abstractmethod
    def _write_rows(self, name: str, params: Mapping[str, Any], *, durable: bool = True) -> int: ...

    def keys_add(
        self,
        name: str,
        digest: str,
        grants: str,
        *,
        admin: bool,
        now: float,
        signing: str | None = None,
    ) -> None:
        params = {"name": name, "hash": digest, "grants": grants, "admin": admin, "now": now,
                  "signing": signing}  # fmt: skip
        try:
            self._write_rows("keys_insert", params)
        except Duplicate:
            # The name, in practice: two random 256-bit secrets do not share a hash.
            raise ConfigurationError(
                f"an API key named {name!r} exists already (a revoked key keeps its name); "
                "pick another name"
            ) from None

    def keys_list(self) -> list[StoredKey]:
        return [_stored_key(row) for row in self._read_rows("keys_list", {})]

    def keys_revoke(self, name: str, now: float) -> bool:
        return self._write_rows("keys_revoke", {"name": name, "now": now}) > 0

    def keys_find(self, digest: str) -> StoredKey | None:
        rows = self._read_rows("keys_find", {"hash": digest})
        return _stored_key(rows[0]) if rows else None

    def keys_used(self, name: str, now: float) -> None:
        self._write_rows("keys_used", {"name": name, "now": now}, durable=False)

    def keys_signing(self, name: str) -> tuple[StoredKey, str | None] | None:
        rows = self._read_rows("keys_signing", {"name": name})
        if not rows:
            return None
        *key, signing = rows[0]
        return _stored_key(tuple(key)), signing

    def keys_set_signing(self, name: str, digest: str, signing: str) -> bool:
        params = {"name": name, "hash": digest, "signing": signing}
        return self._write_rows("keys_set_signing", params) > 0


def _stored_key(row: Row) -> StoredKey:
    name, grants, admin, created_at, used_at, revoked_at = row
    # SQLite keeps the flag as 0 or 1, PostgreSQL as a boolean.
    return StoredKey(name, grants, bool(admin), created_at, used_at, revoked_at)
