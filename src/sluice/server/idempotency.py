"""Idempotency keys: a request made with an ``Idempotency-Key`` header can be retried
safely. The same key with the same request gets the first one's answer (its work is
not done again); with another request, 422; while the first still runs, 409.

A key is claimed (marked running) before the work without an fsync of its own: the
work's durable commit comes after it in the log and makes it durable too, and a claim
lost to a power cut belongs to work that did not commit, whose retry then runs, as it
should (sooner than after ``STALE``).

The answer is stored in the same database transaction as the request's work (an
effect of the queue transaction), so a retry finds the work and its answer, or
neither. A request that failed on the client's side (a 4xx: a missing queue, a body
its type refuses) keeps that answer too; one that failed on the server's side (5xx)
leaves no trace, so the retry runs. A first request whose server died before it
answered is run again by a retry after ``STALE`` seconds. Keys are per API key and
kept a day.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from typing import Any

import sluice
from sluice.backends.records import Effect
from sluice.server.problems import Problem

__all__ = ["KEPT", "STALE", "Idempotency", "Replay", "fingerprint"]

KEPT = 24 * 3600.0
"""Seconds a key and its answer are kept."""

STALE = 60.0
"""Seconds after which a first request with no answer is taken for dead (it would
have answered: the requests that take keys are quick)."""

_KEY = re.compile(r"[\x21-\x7e]{1,255}")
_EXPIRE_EVERY = 60.0


@dataclass(frozen=True, slots=True)
class Replay:
    """The answer of the first request with a key."""

    status: int
    answer: Any


def fingerprint(method: str, path: str, body: Any) -> str:
    """What makes two requests the same: the method, the path and the body's JSON."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{method} {path}\n{canonical}".encode()).hexdigest()


class Idempotency:
    """The idempotency keys of one database's server (see the module docstring)."""

    def __init__(self, db: sluice.Database, *, stale: float = STALE) -> None:
        self._db = db
        self._stale = stale
        self._expired_at = 0.0
        self._lock = threading.Lock()

    def begin(self, owner: str, key: str, request: str) -> Replay | None:
        """Before the work of ``request`` (its fingerprint) with ``key``: None if it runs
        now, else the first request's answer; 422 for a key used by another request or
        malformed, 409 while the first runs."""
        if not _KEY.fullmatch(key):
            raise Problem(422, "an Idempotency-Key is 1 to 255 visible ASCII characters",
                          error="InvalidIdempotencyKey")  # fmt: skip
        backend, now = self._db.backend, self._db.clock.now()
        self._expire(now)
        for _ in range(2):  # once more if the row went (it expired) between the two looks
            if backend.idempotency_claim(owner, key, request, now, durable=False):
                return None
            found = backend.idempotency_find(owner, key)
            if found is None:
                continue
            if found.fingerprint != request:
                raise Problem(
                    422,
                    "this Idempotency-Key was used with another request; use a new key",
                    error="IdempotencyKeyReused",
                )
            if found.status is not None and found.answer is not None:
                return Replay(found.status, json.loads(found.answer))
            if backend.idempotency_restart(owner, key, request, now=now, stale=now - self._stale,
                                           durable=False):  # fmt: skip
                return None
            raise Problem(409, "a request with this Idempotency-Key is running; retry when "
                          "it has answered", error="IdempotencyKeyBusy")  # fmt: skip
        raise Problem(409, "the Idempotency-Key changed hands twice while looked at; retry",
                      error="IdempotencyKeyBusy")  # fmt: skip

    @staticmethod
    def answered(owner: str, key: str, status: int, answer: Any) -> Effect:
        """The effect that stores the answer with the work's transaction."""
        params = {"owner": owner, "key": key, "status": status, "answer": json.dumps(answer)}
        return Effect("idempotency_done", params, expect=1)

    def failed(self, owner: str, key: str, status: int, answer: Any) -> None:
        """The work failed with ``status``: a client's error is the key's answer; after a
        server's, the key is free for the retry."""
        backend = self._db.backend
        if status >= 500:
            backend.idempotency_forget(owner, key)
        else:
            backend.idempotency_answer(owner, key, status, json.dumps(answer))

    def _expire(self, now: float) -> None:
        with self._lock:
            if now - self._expired_at < _EXPIRE_EVERY:
                return
            self._expired_at = now
        self._db.backend.idempotency_expire(now - KEPT)
