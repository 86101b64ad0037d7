"""The database's URL as the environment names it (``SLUICE_URL``, read alike by the CLI
and the server's factory) and as it may be printed (no password)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sluice.errors import ConfigurationError

__all__ = ["ENV", "OLD_ENV", "environment_url", "shown_url"]

log = logging.getLogger(__name__)

ENV = "SLUICE_URL"
"""The one environment variable naming the database."""

OLD_ENV = "SLUICE_DB"
"""What the server's factory read before: still read, with a warning, until it is removed."""


def environment_url(environ: Mapping[str, str]) -> str | None:
    """The URL ``environ`` names: ``SLUICE_URL``, or the deprecated ``SLUICE_DB`` (with a
    warning); both with different values is an error, not a guess. None: neither is set."""
    url, old = environ.get(ENV), environ.get(OLD_ENV)
    if old:
        if url and url != old:
            raise ConfigurationError(
                f"{ENV} and {OLD_ENV} name different databases ({shown_url(url)!r} and "
                f"{shown_url(old)!r}): set {ENV} only ({OLD_ENV} is its old name)"
            )
        if not url:
            log.warning("%s is deprecated: name the database with %s", OLD_ENV, ENV)
        url = url or old
    return url or None


def shown_url(url: str) -> str:
    """``url`` as it may be printed: a password in it replaced by ``***``, also in the
    URL its ``direct=`` option names (PostgreSQL behind a pooler)."""
    if "://" not in url:
        return url  # a plain SQLite path
    parts = urlsplit(url)
    if "direct=" in parts.query:
        query = [(k, shown_url(v) if k == "direct" else v)
                 for k, v in parse_qsl(parts.query, keep_blank_values=True)]  # fmt: skip
        parts = parts._replace(query=urlencode(query, safe=":/@*"))
        url = urlunsplit(parts)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address, bracketed in a URL
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit(parts._replace(netloc=netloc))
