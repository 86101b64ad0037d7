"""``sluice.connect``: from a URL to a Database on the right backend."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from sluice.backends.base import Backend
from sluice.backends.memory import MemoryBackend
from sluice.backends.sqlite import SQLiteBackend, SQLiteSettings, Synchronous
from sluice.catalog import DEFAULT_MAX_SIZE
from sluice.clock import Clock
from sluice.database import Database
from sluice.engine.database import DEFAULT_LEASE, DEFAULT_POLL_INTERVAL
from sluice.errors import ConfigurationError
from sluice.urls import shown_url

__all__ = ["connect"]

_FLOAT_OPTIONS = ("lease", "poll_interval", "busy_timeout", "cache_mib")
_SQLITE_OPTIONS = {"synchronous", "group_commit", "vfs", *_FLOAT_OPTIONS}
_POSTGRES_OPTIONS = {
    "schema",
    "pool_size",
    "migrate",
    "fallback",
    "notify_interval",
    "rotate_every",
    "maintenance_interval",
    "pooler",
    "direct",
    "prepare_threshold",
    "group_commit",
}


def connect(
    url: str,
    *,
    synchronous: Synchronous | None = None,
    busy_timeout: float | None = None,
    lease: float | None = None,
    poll_interval: float | None = None,
    cache_mib: int | None = None,
    group_commit: bool | None = None,
    max_message_size: int = DEFAULT_MAX_SIZE,
    clock: Clock | None = None,
) -> Database:
    """Open the queues at ``url``.

    - ``sqlite:///relative.db``, ``sqlite:////absolute/path.db`` or a plain path:
      a SQLite file (created if missing), shared safely by threads and processes.
    - ``memory://``: queues in this process's memory, gone on close.
    - ``postgresql://user@host:port/dbname``: queues in a PostgreSQL database,
      shared by any number of processes and hosts (needs ``sluice-queue[postgres]``).
      Options: ``schema`` (``sluice``), ``pool_size`` (10 connections),
      ``migrate`` (true: create or upgrade the schema; false: refuse an old one),
      ``fallback`` (1 s between checks for work that no notification announced),
      ``pooler=transaction`` (the URL goes through PgBouncer or another pooler in
      transaction mode) with ``direct`` (a URL of the same database that does not, for
      LISTEN and maintenance), ``prepare_threshold`` (psycopg's; ``none``: statements are
      never prepared on the server; by default 5, or none behind a pooler).
      Other query parameters go to libpq (``sslmode``, ``application_name``...).

    Options may also be given in the URL's query (``?synchronous=NORMAL``);
    keyword arguments win. ``synchronous`` (FULL by default) is SQLite's
    durability level, ``lease`` the seconds after which a silent session is
    rolled back by others, ``cache_mib`` SQLite's page cache (64 MiB),
    ``group_commit`` whether concurrent commits share an fsync (on; on PostgreSQL, the
    acknowledgements threads make at once share a transaction), ``vfs`` the
    SQLite VFS to open the file through (one registered in this process; for tests
    that simulate a disk). ``clock``
    (``sluice.clock``): the time messages and jobs are judged by, for tests and
    demos (default: the wall clock; on PostgreSQL, the server's).
    """
    scheme, path, query = _split(url)
    options: dict[str, Any] = {k.lower(): v for k, v in query.items()}
    for key, value in (
        ("synchronous", synchronous),
        ("busy_timeout", busy_timeout),
        ("lease", lease),
        ("poll_interval", poll_interval),
        ("cache_mib", cache_mib),
        ("group_commit", group_commit),
    ):
        if value is not None:
            options[key] = value
    if scheme in ("postgresql", "postgres"):
        return _database(_postgres(url, options), options, max_message_size, clock)
    unknown = set(options) - _SQLITE_OPTIONS
    if unknown:
        raise ConfigurationError(f"unknown option(s) {', '.join(sorted(unknown))} in {url!r}")
    for key in _FLOAT_OPTIONS:
        if key in options:
            options[key] = _number(key, options[key])
    backend: Backend
    if scheme == "memory":
        backend = MemoryBackend()
    elif scheme == "sqlite":
        settings = SQLiteSettings(
            synchronous=str(options.get("synchronous", "FULL")).upper(),  # type: ignore[arg-type]
            busy_timeout=options.get("busy_timeout", 30.0),
            cache_mib=int(options.get("cache_mib", 64)),
            group_commit=_flag("group_commit", options.get("group_commit", True)),
            vfs=options.get("vfs"),
        )
        backend = SQLiteBackend(path, settings)
    else:
        raise ConfigurationError(
            f"unsupported URL scheme {scheme!r} in {url!r}; "
            "use sqlite:///path.db, memory:// or postgresql://host/dbname"
        )
    return _database(backend, options, max_message_size, clock)


def _postgres(url: str, options: dict[str, Any]) -> Backend:
    # Imported here: psycopg is an optional extra, and SQLite users need not have it.
    from sluice.backends.postgres import PostgresBackend, PostgresSettings  # noqa: PLC0415

    ours = {k: options.pop(k) for k in list(options) if k in _POSTGRES_OPTIONS}
    unknown = set(options) & (_SQLITE_OPTIONS - {"lease", "poll_interval"})
    if unknown:
        raise ConfigurationError(
            f"option(s) {', '.join(sorted(unknown))} are SQLite's; PostgreSQL takes "
            f"{', '.join(sorted(_POSTGRES_OPTIONS))}"
        )
    # What is neither ours nor the engine's (lease, poll_interval) is libpq's.
    parts = urlsplit(url)
    libpq = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() not in
             _POSTGRES_OPTIONS | {"lease", "poll_interval"}]  # fmt: skip
    for key, _ in libpq:
        options.pop(key.lower(), None)
    # Percent-encoded, never '+' for a space: libpq decodes only %XX (options=-c a=b).
    conninfo = urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urlencode(libpq, quote_via=quote), "")
    )
    # libpq's connect_timeout also bounds the wait for a pooled connection.
    timeout = {k.lower(): v for k, v in libpq}.get("connect_timeout")
    settings = PostgresSettings(
        connect_timeout=10.0 if timeout is None else _number("connect_timeout", timeout),
        schema=str(ours.get("schema", "sluice")),
        pool_size=int(_number("pool_size", ours.get("pool_size", 10))),
        migrate=_flag("migrate", ours.get("migrate", True)),
        fallback=_number("fallback", ours.get("fallback", 1.0)),
        notify_interval=_number("notify_interval", ours.get("notify_interval", 0.005)),
        rotate_every=int(_number("rotate_every", ours.get("rotate_every", 2000))),
        maintenance_interval=_number("maintenance_interval", ours.get("maintenance_interval", 1.0)),
        group_commit=_flag("group_commit", ours.get("group_commit", True)),
        **_pooling(url, ours),
    )
    return PostgresBackend(conninfo, settings)


def _pooling(url: str, ours: dict[str, Any]) -> dict[str, Any]:
    """The options for a pooler: ``pooler``, ``direct`` and ``prepare_threshold``, checked."""
    from sluice.backends.postgres_settings import POOLERS  # noqa: PLC0415

    found: dict[str, Any] = {}
    pooler = str(ours.get("pooler", "none")).lower()
    if pooler not in (*POOLERS, "none"):
        raise ConfigurationError(
            f"pooler={pooler!r} in {shown_url(url)!r}: sluice knows pooler=transaction "
            "(PgBouncer or another pooler in transaction mode) or none"
        )
    if pooler != "none":
        found["pooler"] = pooler
    direct = ours.get("direct")
    if direct is not None:
        if pooler == "none":
            raise ConfigurationError(
                f"direct= in {shown_url(url)!r} names the URL that bypasses a pooler; "
                "declare the pooler too (pooler=transaction), or drop direct="
            )
        if urlsplit(str(direct)).scheme not in ("postgresql", "postgres"):
            raise ConfigurationError(
                f"direct= in {shown_url(url)!r} must be a postgresql:// URL of the same "
                "database without the pooler (percent-encoded if it has a query of its own)"
            )
        found["direct"] = str(direct)
    threshold = ours.get("prepare_threshold")
    if threshold is not None:
        text = str(threshold).lower()
        if text == "none":
            found["prepare_threshold"] = None
        elif text.isdigit():
            found["prepare_threshold"] = int(text)
        else:
            raise ConfigurationError(
                f"option prepare_threshold must be a whole number of executions or none, "
                f"not {threshold!r}"
            )
    return found


def _database(
    backend: Backend, options: dict[str, Any], max_message_size: int, clock: Clock | None
) -> Database:
    for key in ("lease", "poll_interval"):
        if key in options:
            options[key] = _number(key, options[key])
    try:
        return Database(
            backend,
            lease=options.get("lease", DEFAULT_LEASE),
            poll_interval=options.get("poll_interval", DEFAULT_POLL_INTERVAL),
            max_message_size=max_message_size,
            clock=clock,
        )
    except BaseException:
        backend.close()
        raise


def _split(url: str) -> tuple[str, str, dict[str, str]]:
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"a database URL is a non-empty str, not {url!r}")
    if "://" not in url:
        _check_plain_path(url)
        return "sqlite", url, {}
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if parts.scheme == "sqlite":
        if parts.netloc:
            raise ConfigurationError(
                f"{url!r}: a SQLite URL has three slashes before a relative path "
                "(sqlite:///queues.db) and four before an absolute one (sqlite:////var/q.db)"
            )
        path = unquote(parts.path[1:])
        if not path:
            raise ConfigurationError(f"{url!r} names no file; use sqlite:///queues.db")
        return "sqlite", path, query
    return parts.scheme, parts.path, query


_SCHEMES = ("sqlite", "memory", "postgresql", "postgres")


def _check_plain_path(url: str) -> None:
    """Refuse a plain path that is really a mistyped URL, before it becomes a SQLite file.

    ``memory:``, ``memory`` and ``sqlite:/q.db`` would otherwise each create a file of that
    name in the working directory, and the user's queues would silently live there.
    """
    scheme, colon, rest = url.partition(":")
    word = scheme.lower()
    if word in ("memory", "") and rest in ("", "memory:"):
        raise ConfigurationError(
            f"{url!r} would be a SQLite file of that name; for queues in memory use memory://"
        )
    if not colon and word in _SCHEMES:
        raise ConfigurationError(
            f"{url!r} would be a SQLite file of that name; a URL has '://' "
            "(sqlite:///queues.db, memory://, postgresql://host/dbname)"
        )
    if colon and word in _SCHEMES:
        right = {
            "sqlite": f"sqlite:///{rest.lstrip('/')} (relative) or sqlite:////{rest.lstrip('/')}"
            " (absolute)",
            "memory": "memory://",
        }.get(word, f"{word}://{rest.lstrip('/')}")
        raise ConfigurationError(f"{url!r} is not a URL sluice reads; did you mean {right}?")


def _number(key: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"option {key} must be a number of seconds, not {value!r}"
        ) from None


def _flag(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"option {key} must be true or false, not {value!r}")
