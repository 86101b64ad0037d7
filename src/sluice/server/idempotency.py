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
leaves no trace, so the retry runs. A claimed first request whose server died before
it answered is run again by a retry after ``STALE`` seconds. Keys are per API key and
kept a day.

``once`` runs a request on a quicker path first: no claim at all, the key's row
written whole (fingerprint and answer) by the work's own commit, ``INSERT ... ON
CONFLICT DO NOTHING`` expecting every key to be new. Two requests with one key then
cannot both commit: the second's insert finds the first's row (PostgreSQL waits for the
first's commit to know) and its whole transaction changes nothing (``Conflict``). Only
then, or when the work fails, does the request take the claiming path above, which says
what the key holds (a replay, 422, 409) or runs the work again under its claim. A
request that dies before its commit on the quick path leaves no trace, so its retry
runs at once.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi.responses import JSONResponse

import sluice
from sluice.backends.records import Effect
from sluice.errors import SluiceError
from sluice.server.problems import PROBLEM, Problem, problem_body, status_of

__all__ = ["KEPT", "STALE", "Answered", "Idempotency", "Replay", "fingerprint"]

_T = TypeVar("_T")

Answered = Callable[[Sequence[Any]], Effect]
"""What the work calls with its answers (one per key, in the keys' order, each stored
with status 201): the effect that stores them with the work's commit."""

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

    def response(self) -> JSONResponse:
        """The first request's answer, said again."""
        media = PROBLEM if self.status >= 400 else "application/json"
        return JSONResponse(self.answer, status_code=self.status, media_type=media,
                            headers={"Idempotent-Replayed": "true"})  # fmt: skip


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

    def once(
        self, owner: str, keyed: Sequence[tuple[str, str]], work: Callable[[Answered], _T]
    ) -> _T | Replay | None:
        """Run ``work`` once for the ``keyed`` requests ((key, fingerprint) each; one
        request, or the entries of a batch done in one transaction): its result, or,
        for a single request that ran before (or cannot run now), its replay. ``work``
        stores its answers through the effect it is given. Several keys of which one
        was used already (or whose work failed) run the work not at all: None, and the
        caller takes them one by one with ``begin``.
        """
        for key, _ in keyed:
            _check_key(key)
        now = self._db.clock.now()
        self._expire(now)
        try:
            return work(lambda answers: self._recorded(owner, keyed, answers, now))
        except (SluiceError, Problem):  # a key used already, or the work failed: below
            pass
        if len(keyed) != 1:
            return None
        ((key, request),) = keyed
        replay = self.begin(owner, key, request)
        if replay is not None:
            return replay
        try:
            return work(lambda answers: self.answered(owner, key, 201, answers[0]))
        except Problem as exc:
            self.failed(owner, key, exc.status, problem_body(exc.status, exc.detail,
                                                             error=exc.error))  # fmt: skip
            raise
        except SluiceError as exc:
            status = status_of(exc)
            self.failed(owner, key, status, problem_body(status, str(exc),
                                                         error=type(exc).__name__))  # fmt: skip
            raise
        except BaseException:
            self.failed(owner, key, 500, None)
            raise

    @staticmethod
    def _recorded(
        owner: str, keyed: Sequence[tuple[str, str]], answers: Sequence[Any], now: float
    ) -> Effect:
        if len(answers) != len(keyed):
            raise ValueError(f"{len(answers)} answers for {len(keyed)} keys")
        rows = [[key, asked, answer] for (key, asked), answer in zip(keyed, answers, strict=True)]
        params = {"owner": owner, "status": 201, "keys": json.dumps(rows), "now": now,
                  "count": len(rows)}  # fmt: skip
        return Effect("idempotency_record", params, expect=len(rows))

    def begin(self, owner: str, key: str, request: str) -> Replay | None:
        """Before the work of ``request`` (its fingerprint) with ``key``: None if it runs
        now, else the first request's answer; 422 for a key used by another request or
        malformed, 409 while the first runs."""
        _check_key(key)
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


def _check_key(key: str) -> None:
    if not _KEY.fullmatch(key):
        raise Problem(422, "an Idempotency-Key is 1 to 255 visible ASCII characters",
                      error="InvalidIdempotencyKey")  # fmt: skip
