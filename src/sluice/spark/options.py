"""The options of the ``sluice`` Spark data source, read once and checked with clear errors.

Spark hands options over as a case-insensitive map of strings; every value is
parsed here, so a typo fails when the query is planned, not in a task.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, unquote, urlsplit

from sluice.connect import connect
from sluice.engine.database import Engine
from sluice.errors import ConfigurationError, SluiceError

__all__ = [
    "DEFAULT_MAX_PER_BATCH",
    "Options",
    "absolute_url",
    "close_connections",
    "connection",
]

log = logging.getLogger("sluice.spark")

DEFAULT_MAX_PER_BATCH: Final = 10_000
DEFAULT_STAGING_TIMEOUT: Final = 3600.0
DEFAULT_ROWS_PER_PARTITION: Final = 100_000

_KNOWN: Final = frozenset(
    {
        "url",
        "queue",
        "where",
        "name",
        "max_per_batch",
        "body_schema",
        "partitions",
        "rows_per_partition",
        "state",
        "staging_timeout",
        "pushdown",
        "exclusive",
        "path",  # what load(path)/save(path) set: taken as the queue
        "checkpointlocation",  # Spark's own, handed to the sink too
    }
)
_STATES: Final = ("ready", "delayed", "claimed", "expired", "failed", "done")


@dataclass(frozen=True, slots=True)
class Options:
    """What a read or write of the data source was asked to do."""

    url: str
    queue: str | None
    where: str | None
    name: str | None
    max_per_batch: int
    body_schema: str | None
    partitions: int | None
    rows_per_partition: int
    state: str
    staging_timeout: float
    pushdown: bool
    exclusive: bool | None
    """A streaming read is its queue's only consumer and reads by position (None: the
    default, yes for a subscription, no for a queue)."""

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> Options:
        options = {k.lower(): v for k, v in raw.items()}
        unknown = sorted(set(options) - _KNOWN)
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {', '.join(unknown)} for format('sluice'); "
                f"it takes {', '.join(sorted(_KNOWN - {'path'}))}"
            )
        url = options.get("url")
        if not url:
            raise ConfigurationError("format('sluice') needs option url, e.g. sqlite:///queues.db")
        state = options.get("state", "ready")
        if state not in _STATES:
            raise ConfigurationError(f"option state must be one of {', '.join(_STATES)}")
        partitions = options.get("partitions")
        return cls(
            url=url,
            queue=options.get("queue") or options.get("path") or None,
            where=options.get("where") or None,
            name=options.get("name") or None,
            max_per_batch=_positive("max_per_batch", options, DEFAULT_MAX_PER_BATCH),
            body_schema=options.get("body_schema") or None,
            partitions=None if partitions is None else _positive("partitions", options, 1),
            rows_per_partition=_positive("rows_per_partition", options, DEFAULT_ROWS_PER_PARTITION),
            state=state,
            staging_timeout=float(
                _positive("staging_timeout", options, int(DEFAULT_STAGING_TIMEOUT))
            ),
            pushdown=_flag("pushdown", options),
            exclusive=_flag("exclusive", options) if "exclusive" in options else None,
        )

    def need_queue(self) -> str:
        if not self.queue:
            raise ConfigurationError("format('sluice') needs option queue (the queue's name)")
        return self.queue

    def need_name(self, what: str) -> str:
        if not self.name:
            raise ConfigurationError(
                f"a {what} needs option name: a name that stays the same across restarts, "
                "under which sluice keeps its progress (one query per name)"
            )
        return self.name


def _flag(key: str, options: Mapping[str, str]) -> bool:
    text = options.get(key, "false").strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(f"option {key} must be true or false, not {text!r}")
    return text == "true"


def _positive(key: str, options: Mapping[str, str], default: int) -> int:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigurationError(f"option {key} must be a positive integer, not {text!r}") from None
    if value < 1:
        raise ConfigurationError(f"option {key} must be a positive integer, not {text!r}")
    return value


_connections: dict[str, Engine] = {}
_lock = threading.Lock()
_KEEP: Final = 4
"""Databases a process keeps open (each has a session, and on PostgreSQL a pool)."""


def connection(url: str) -> Engine:
    """This process's Database for ``url``, opened once: Spark reuses its Python workers."""
    with _lock:
        db = _connections.pop(url, None)
        if db is None:
            if url.startswith("memory:"):
                raise ConfigurationError(
                    "memory:// queues live in one process; Spark's workers need a shared "
                    "database: use sqlite:///path.db or postgresql://..."
                )
            db = connect(url)
            while len(_connections) >= _KEEP:  # the least recently used goes
                _close(_connections.pop(next(iter(_connections))))
        _connections[url] = db  # re-inserted: the most recently used is last
        return db


def _close(db: Engine) -> None:
    try:
        db.close()
    except SluiceError as exc:  # its database may be gone by now; nothing is held here
        log.warning("sluice: closing a Spark worker's connection failed: %s", exc)


@atexit.register
def close_connections() -> None:
    """Close the Databases this process opened for Spark (done at exit anyway)."""
    with _lock:
        for db in _connections.values():
            _close(db)
        _connections.clear()


def absolute_url(url: str) -> str:
    """``url`` with a relative SQLite path made absolute, from this process's directory.

    Spark's Python workers start in the directory the JVM started in, not the
    driver's present one: a relative path must be resolved before it is handed over.
    """
    if "://" not in url:
        return f"sqlite:///{os.path.abspath(url)}"
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or parts.path.startswith("//"):
        return url
    path = os.path.abspath(unquote(parts.path[1:]))
    return f"sqlite:///{quote(path)}" + (f"?{parts.query}" if parts.query else "")
