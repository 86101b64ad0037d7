"""API keys of the server and their grants: who a request's key says it is, and what it
may do on which queues.

A key's secret is shown once, when it is added; the store keeps its SHA-256 and, when
the server has a signing key (sluice.server.signing), the secret encrypted under it, for
Signature Version 4 (the SQS endpoint). A key is either ``admin`` (everything) or has
grants: actions on the queues whose names match a pattern in which ``*`` stands for any
run of characters.
"""

from __future__ import annotations

import builtins
import fnmatch
import functools
import hashlib
import json
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.backends.records import StoredKey
from sluice.database import Database
from sluice.errors import ConfigurationError, KeyNotFound
from sluice.server.signing import SigningKey

__all__ = [
    "ACTIONS",
    "KEY_PREFIX",
    "REMEMBER",
    "USED_EVERY",
    "Grant",
    "KeyInfo",
    "Keys",
    "Principal",
]

ACTIONS = frozenset({"produce", "consume", "browse", "manage"})
"""What a grant may allow on a queue: enqueue into it, take from it, look at its
messages without taking them, and change or drop the queue itself."""

KEY_PREFIX = "sk_"
"""How every key's secret starts, so that a leaked one is recognisable (scanners, logs)."""

USED_EVERY = 60.0
"""Seconds between the marks of a key as used: marking each request would make every
request, reads too, a write."""

REMEMBER = 1.0
"""Seconds a server goes on trusting a key it has looked up, before it asks the store
again: a key revoked by another process (``sluice keys revoke``, another server) is
refused within this; one revoked through this process's ``Keys``, at once. Without it,
every request would pay a read of the store (a round trip on PostgreSQL)."""

_REMEMBERED = 10_000
"""The most keys remembered at once; past it the memory starts again, so that no number
of distinct keys can grow it."""

_KEY_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_GLOB_SPECIAL = re.compile(r"([?\[])")


@functools.lru_cache(maxsize=1024)
def _matcher(pattern: str) -> Callable[[str], re.Match[str] | None]:
    """The whole-name match of a grant's pattern: ``*`` is the only wildcard (``?`` and
    ``[`` match themselves). Compiled once per pattern: every request asks."""
    return re.compile(fnmatch.translate(_GLOB_SPECIAL.sub(r"[\1]", pattern))).match


@dataclass(frozen=True, slots=True)
class Grant:
    """``actions`` allowed on every queue whose name matches ``pattern``.

    In the pattern only ``*`` is special (any run of characters, none included);
    ``?`` and ``[`` are themselves.
    """

    pattern: str
    actions: frozenset[str]

    def __post_init__(self) -> None:
        if not self.pattern:
            raise ConfigurationError("a grant needs a queue name pattern, such as 'orders*'")
        if not self.actions:
            raise ConfigurationError(
                f"the grant on {self.pattern!r} allows nothing: "
                f"give one or more of {', '.join(sorted(ACTIONS))}"
            )
        if unknown := sorted(self.actions - ACTIONS):
            raise ConfigurationError(
                f"unknown action(s) {', '.join(map(repr, unknown))} in the grant on "
                f"{self.pattern!r}: use {', '.join(sorted(ACTIONS))}"
            )

    @classmethod
    def parse(cls, text: str) -> Grant:
        """A grant from its text, ``pattern:action,action`` (``'orders*:produce,consume'``).

        The pattern ends at the last colon, since queue names may contain colons.
        """
        pattern, colon, actions = text.rpartition(":")
        if not colon:
            raise ConfigurationError(
                f"the grant {text!r} has no colon: write PATTERN:ACTIONS, "
                "such as 'orders*:produce,consume'"
            )
        return cls(pattern.strip(), frozenset(a.strip() for a in actions.split(",") if a.strip()))

    def matches(self, queue: str) -> bool:
        """Whether the pattern matches the queue's whole name."""
        return _matcher(self.pattern)(queue) is not None

    def __str__(self) -> str:
        """The grant as :meth:`parse` reads it."""
        return f"{self.pattern}:{','.join(sorted(self.actions))}"


@dataclass(frozen=True, slots=True)
class Principal:
    """Whom a request's key stands for: the key's name and what it may do."""

    name: str
    admin: bool
    grants: tuple[Grant, ...]

    def allows(self, queue: str, action: str) -> bool:
        """Whether the key may do ``action`` (one of ACTIONS) on ``queue``; an admin may
        do everything."""
        if action not in ACTIONS:
            # A typo in the server's code must not read as a refusal of the key.
            raise ValueError(f"unknown action {action!r}: one of {', '.join(sorted(ACTIONS))}")
        return self.admin or any(action in g.actions and g.matches(queue) for g in self.grants)


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """A key as ``Keys.list`` shows it: never its secret, nor the secret's hash.

    Times are seconds since the epoch; ``used_at`` is None until the key is first used,
    and is marked at most every USED_EVERY seconds.
    """

    name: str
    grants: tuple[Grant, ...]
    admin: bool
    created_at: float
    used_at: float | None
    revoked_at: float | None

    @property
    def revoked(self) -> bool:
        """Whether the key was revoked: requests that present it are refused."""
        return self.revoked_at is not None

    def as_dict(self) -> dict[str, Any]:
        """The key as JSON values (grants as their text)."""
        return {
            "name": self.name,
            "grants": [str(g) for g in self.grants],
            "admin": self.admin,
            "created_at": self.created_at,
            "used_at": self.used_at,
            "revoked_at": self.revoked_at,
        }


class Keys:
    """The server's API keys in a database: add, list, revoke, and authenticate a secret."""

    def __init__(
        self, db: Database, *, remember: float = REMEMBER, signing: SigningKey | None = None
    ) -> None:
        self._db = db
        self._remember = remember
        self._signing = signing
        # Names of keys known to have their signing secret stored (no need to look again).
        self._sealed: set[str] = set()
        # Access key id -> whom it stands for, its signing secret, when it was read.
        self._signers: dict[str, tuple[Principal, str, float]] = {}
        # The digest of a found secret -> whom it stands for, and when it was read (the
        # database's clock, so that a test's manual clock can move past it).
        self._recent: dict[str, tuple[Principal, float]] = {}

    def add(self, name: str, grants: Sequence[Grant], *, admin: bool = False) -> str:
        """Add a key and return its secret; it is not stored, and cannot be shown again.

        ``name``: 1-64 letters, digits and _ . -; ConfigurationError if a key of that
        name exists (a revoked key keeps its name). A key needs grants or ``admin``.
        """
        if not isinstance(name, str) or not _KEY_NAME.fullmatch(name):
            raise ConfigurationError(
                f"invalid API key name {name!r}: use 1-64 letters, digits and _ . -"
            )
        if not grants and not admin:
            raise ConfigurationError(
                f"the key {name!r} would allow nothing: give it grants (--grant) or admin"
            )
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        sealed = None if self._signing is None else self._signing.seal(name, secret)
        self._db.backend.keys_add(name, _digest(secret), _grants_json(grants), admin=admin,
                                  now=self._db.clock.now(), signing=sealed)  # fmt: skip
        return secret

    def list(self) -> builtins.list[KeyInfo]:  # builtins: "list" is this method here
        """Every key, revoked ones too, by name."""
        return [_info(stored) for stored in self._db.backend.keys_list()]

    def revoke(self, name: str) -> None:
        """Revoke the key: requests that present it are refused from now on.

        KeyNotFound if there is no such key; revoking a revoked key changes nothing.
        """
        # A name no key can have is not asked of the store: a NUL in it failed there (a
        # StorageError on PostgreSQL) and a lone surrogate in the driver.
        named = isinstance(name, str) and _KEY_NAME.fullmatch(name)
        if not named or not self._db.backend.keys_revoke(name, self._db.clock.now()):
            raise KeyNotFound(f"no API key named {name!r}; see `sluice keys list`")
        self._recent.clear()
        self._signers.clear()

    def remembered(self, secret: str) -> Principal | None:
        """Whom ``secret`` stands for if it was found within the last ``remember``
        seconds, without asking the store; None: ask :meth:`authenticate`.

        Unknown secrets are never remembered: a key added elsewhere works at once, and
        guesses cannot fill the memory."""
        seen = self._recent.get(_digest(secret))
        if seen is None or self._db.clock.now() - seen[1] >= self._remember:
            return None
        return seen[0]

    def authenticate(self, secret: str) -> Principal | None:
        """Whom ``secret`` stands for, or None: no key has it, or its key is revoked."""
        if not secret.startswith(KEY_PREFIX):
            return None  # not one of ours: no need to ask the database
        # The secret is looked up by its hash through an index: a comparison that takes
        # longer for a longer common prefix would only tell an attacker about hashes,
        # which reveal nothing of the secrets they come from.
        digest = _digest(secret)
        stored = self._db.backend.keys_find(digest)
        if stored is None:
            self._recent.pop(digest, None)
            return None
        now = self._db.clock.now()
        if stored.used_at is None or now - stored.used_at >= USED_EVERY:
            self._db.backend.keys_used(stored.name, now)
        found = Principal(stored.name, stored.admin, _grants_of(stored.grants))
        if self._signing is not None and stored.name not in self._sealed:
            self._seal(stored.name, secret, digest)
        if len(self._recent) >= _REMEMBERED:
            self._recent.clear()
        self._recent[digest] = (found, now)
        return found

    def remembered_signer(self, access_key: str) -> tuple[Principal, str] | None:
        """:meth:`signer`'s answer if it was found within the last ``remember`` seconds,
        without asking the store (so without leaving the event loop); None: ask
        :meth:`signer`."""
        seen = self._signers.get(access_key)
        if seen is None or self._db.clock.now() - seen[2] >= self._remember:
            return None
        return seen[0], seen[1]

    def signer(self, access_key: str) -> tuple[Principal, str] | None:
        """Whom the access key id ``access_key`` (a key's name) stands for and its secret,
        to check a Signature Version 4 request; None if there is no such unrevoked key, or
        its secret cannot be recovered (no signing key here, none stored for it yet, or
        sealed under another signing key). Remembered as :meth:`remembered` is."""
        now = self._db.clock.now()
        seen = self._signers.get(access_key)
        if seen is not None and now - seen[2] < self._remember:
            return seen[0], seen[1]
        if self._signing is None or not _KEY_NAME.fullmatch(access_key):
            return None
        found = self._db.backend.keys_signing(access_key)
        if found is None:
            return None
        stored, sealed = found
        secret = None if sealed is None else self._signing.open(stored.name, sealed)
        if secret is None:
            return None
        if stored.used_at is None or now - stored.used_at >= USED_EVERY:
            self._db.backend.keys_used(stored.name, now)
        who = Principal(stored.name, stored.admin, _grants_of(stored.grants))
        if len(self._signers) >= _REMEMBERED:
            self._signers.clear()
        self._signers[access_key] = (who, secret, now)
        return who, secret

    def _seal(self, name: str, secret: str, digest: str) -> None:
        """A key made without a signing secret gets one now that a request showed it (the
        migration of keys made before the server had a signing key: docs/sqs.md)."""
        if self._signing is None:
            return
        found = self._db.backend.keys_signing(name)
        if found is not None and found[1] is None:
            self._db.backend.keys_set_signing(name, digest, self._signing.seal(name, secret))
        self._sealed.add(name)


def _digest(secret: str) -> str:
    # SHA-256 and no slow, salted password hash: those make guessing a human's short
    # password costly, while a secret of 256 random bits cannot be guessed at any speed,
    # and a fast hash keeps every request's lookup cheap.
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _grants_json(grants: Sequence[Grant]) -> str:
    return json.dumps([{"pattern": g.pattern, "actions": sorted(g.actions)} for g in grants])


def _grants_of(text: str) -> tuple[Grant, ...]:
    return tuple(Grant(g["pattern"], frozenset(g["actions"])) for g in json.loads(text))


def _info(stored: StoredKey) -> KeyInfo:
    return KeyInfo(
        stored.name,
        _grants_of(stored.grants),
        stored.admin,
        stored.created_at,
        stored.used_at,
        stored.revoked_at,
    )
