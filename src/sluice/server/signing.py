"""The server's signing key: it keeps the API keys' secrets recoverable for Signature
Version 4 (the SQS endpoint, docs/sqs.md), which needs the secret itself where a Bearer
key needs only its hash.

A secret is stored encrypted with AES-256-GCM under the signing key, bound to its key's
name, so that a row copied onto another key's name does not decrypt. The signing key is
32 random bytes kept in a file outside the database (``sluice keys signing-key FILE``
makes one; ``SLUICE_SIGNING_KEY_FILE`` or ``--signing-key`` names it): the database alone
(a backup, a replica) gives no secret away.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.errors import ConfigurationError
from sluice.extras import require

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["ENV", "SigningKey"]

ENV = "SLUICE_SIGNING_KEY_FILE"
"""The environment variable naming the signing key's file (the CLI and the server read it)."""

_VERSION = "v1:"
_NONCE = 12


def _aesgcm(key: bytes) -> AESGCM:
    require("sqs", "a signing key (the secrets SQS's signatures are checked with)")
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415

    return AESGCM(key)


class SigningKey:
    """The key that encrypts API keys' secrets in the database (see the module docstring)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ConfigurationError(f"a signing key is 32 bytes, not {len(key)}")
        self._cipher = _aesgcm(key)

    @classmethod
    def generate(cls, path: str | os.PathLike[str]) -> SigningKey:
        """Write a new random key into a new file ``path`` (readable by its owner only)."""
        key = secrets.token_bytes(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise ConfigurationError(
                f"{os.fspath(path)!r} exists already: a signing key is never overwritten "
                "(the secrets encrypted under it would be lost)"
            ) from None
        with os.fdopen(fd, "w") as f:
            f.write(base64.urlsafe_b64encode(key).decode() + "\n")
        return cls(key)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SigningKey:
        """The key in file ``path`` (written by :meth:`generate`)."""
        try:
            text = Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the signing key {os.fspath(path)!r}: {exc}"
            ) from None
        try:
            key = base64.urlsafe_b64decode(text.encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raise ConfigurationError(
                f"{os.fspath(path)!r} is not a signing key: make one with "
                "`sluice keys signing-key FILE`"
            ) from None
        return cls(key)

    def seal(self, name: str, secret: str) -> str:
        """``secret`` of the key ``name``, encrypted (text to store)."""
        nonce = secrets.token_bytes(_NONCE)
        sealed = self._cipher.encrypt(nonce, secret.encode("utf-8"), name.encode("utf-8"))
        return _VERSION + base64.b64encode(nonce + sealed).decode("ascii")

    def open(self, name: str, stored: str) -> str | None:
        """The secret of key ``name`` from ``stored``; None if it was not sealed under this
        key (another server's signing key) or for this name."""
        from cryptography.exceptions import InvalidTag  # noqa: PLC0415  (the extra)

        if not stored.startswith(_VERSION):
            return None
        try:
            raw = base64.b64decode(stored[len(_VERSION) :])
            plain = self._cipher.decrypt(raw[:_NONCE], raw[_NONCE:], name.encode("utf-8"))
        except (ValueError, InvalidTag):
            return None
        return plain.decode("utf-8")
