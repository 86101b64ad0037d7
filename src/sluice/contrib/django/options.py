"""A sluice backend's ``OPTIONS``: read once, checked, with defaults that suit a Django project.

Every mistake is reported as Django's ``ImproperlyConfigured`` naming the ``TASKS`` entry
and what to write instead, when the backend is built (at the first use of
``task_backends[alias]``), not when a task first runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlencode

from django.core.exceptions import ImproperlyConfigured

__all__ = ["DEFAULT_RETENTION", "Options", "TransactionMode", "database_url", "read_options"]

TransactionMode = Literal["auto", "join", "on_commit"]

DEFAULT_RETENTION = 7 * 86400.0
"""Seconds a finished task's result is kept (sluice's job retention; docs/jobs.md)."""

_KNOWN = {
    "url", "database", "transaction", "prefix", "retention", "max_attempts", "timeout",
    "deadline", "schema",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Options:
    """What one ``TASKS`` entry asks of sluice (docs/django.md has the table)."""

    alias: str
    """The ``TASKS`` alias, for messages."""
    url: str | None
    """The sluice database; None: derived from the Django database (``database_url``)."""
    database: str
    """The Django database alias whose transactions enqueues follow."""
    transaction: TransactionMode
    prefix: str
    """Task type of a queue: ``prefix + queue_name`` (its sluice queue: ``tasks.<type>``)."""
    retention: float | None
    max_attempts: int
    timeout: float | None
    deadline: float | None
    schema: str
    """The PostgreSQL schema of a URL derived from a PostgreSQL Django database."""

    def task_type(self, queue_name: str) -> str:
        return f"{self.prefix}{queue_name}"


def read_options(alias: str, options: Mapping[str, Any]) -> Options:
    """``OPTIONS`` of ``TASKS[alias]`` checked; ImproperlyConfigured says what is wrong."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, Mapping):
        raise ImproperlyConfigured(f"{where} must be a dict, not {type(options).__name__}")
    unknown = sorted(set(options) - _KNOWN)
    if unknown:
        raise ImproperlyConfigured(
            f"{where} has unknown option(s) {', '.join(map(repr, unknown))}; "
            f"the options are {', '.join(sorted(_KNOWN))} (docs/django.md)"
        )
    url = options.get("url")
    if url is not None and (not isinstance(url, str) or not url):
        raise ImproperlyConfigured(
            f"{where}['url'] must be a sluice URL such as 'sqlite:///sluice.db' or "
            f"'postgresql://host/db', not {url!r}"
        )
    transaction = options.get("transaction", "auto")
    if transaction not in ("auto", "join", "on_commit"):
        raise ImproperlyConfigured(
            f"{where}['transaction'] must be 'auto', 'join' (PostgreSQL: in the caller's "
            f"transaction) or 'on_commit', not {transaction!r}"
        )
    max_attempts = options.get("max_attempts", 3)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ImproperlyConfigured(
            f"{where}['max_attempts'] must be an int >= 1, not {max_attempts!r}"
        )
    return Options(
        alias=alias,
        url=url,
        database=_text(where, options, "database", "default"),
        transaction=transaction,
        prefix=_text(where, options, "prefix", "django."),
        retention=_seconds(where, options, "retention", DEFAULT_RETENTION),
        max_attempts=max_attempts,
        timeout=_seconds(where, options, "timeout", None),
        deadline=_seconds(where, options, "deadline", None),
        schema=_text(where, options, "schema", "sluice"),
    )


def _text(where: str, options: Mapping[str, Any], name: str, default: str) -> str:
    value = options.get(name, default)
    if not isinstance(value, str) or not value:
        raise ImproperlyConfigured(f"{where}[{name!r}] must be a non-empty str, not {value!r}")
    return value


def _seconds(
    where: str, options: Mapping[str, Any], name: str, default: float | None
) -> float | None:
    value = options.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ImproperlyConfigured(
            f"{where}[{name!r}] must be seconds (a number >= 0) or None, not {value!r}"
        )
    return float(value)


def database_url(options: Options, settings: Mapping[str, Any]) -> str:
    """The sluice URL of ``options``, or one derived from the Django database's ``settings``.

    PostgreSQL: the same database, in the schema ``options.schema``, so that enqueues can
    join the application's transactions. SQLite: a file ``sluice.db`` beside the
    application's database file (sluice never shares a file with another schema).
    """
    if options.url is not None:
        return options.url
    engine = str(settings.get("ENGINE", ""))
    name = settings.get("NAME")
    if engine.endswith("postgresql"):
        return _postgres_url(settings, options.schema)
    if (
        engine.endswith("sqlite3")
        and name
        and str(name) != ":memory:"
        and "mode=memory" not in str(name)
    ):
        return f"sqlite:///{Path(str(name)).resolve().parent / 'sluice.db'}"
    raise ImproperlyConfigured(
        f"TASKS[{options.alias!r}]: sluice cannot derive its database from DATABASES"
        f"[{options.database!r}] ({engine or 'no ENGINE'}, NAME {name!r}); set "
        f"TASKS[{options.alias!r}]['OPTIONS']['url'] to a sluice URL, such as "
        "'sqlite:////var/lib/myproject/sluice.db' or 'postgresql://host/db'"
    )


def _postgres_url(settings: Mapping[str, Any], schema: str) -> str:
    user = quote(str(settings.get("USER") or ""), safe="")
    password = quote(str(settings.get("PASSWORD") or ""), safe="")
    host = str(settings.get("HOST") or "")
    port = str(settings.get("PORT") or "")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    query: dict[str, str] = {}
    if host.startswith("/"):  # a Unix socket directory: libpq's host parameter
        netloc = credentials
        query["host"] = host
        if port:
            query["port"] = port
    else:
        netloc = credentials + (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    libpq = settings.get("OPTIONS") or {}
    for key in ("sslmode", "sslrootcert", "sslcert", "sslkey", "service", "passfile"):
        if key in libpq:
            query[key] = str(libpq[key])
    query["schema"] = schema
    name = quote(str(settings.get("NAME") or ""), safe="")
    return f"postgresql://{netloc}/{name}?{urlencode(query)}"
