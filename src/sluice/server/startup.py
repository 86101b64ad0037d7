"""What a server says and reads as it starts: the database's URL from the environment
(``SLUICE_URL``, as the CLI reads it), and a warning when no API key could use it."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

import sluice
from sluice.errors import ConfigurationError
from sluice.server.grants import Keys

__all__ = ["ENV", "OLD_ENV", "database_url", "keyless", "no_key_warning", "shown_url"]

log = logging.getLogger(__name__)

ENV = "SLUICE_URL"
"""The database's URL, for the server's factory as for the CLI."""

OLD_ENV = "SLUICE_DB"
"""What the factory read before: still read, with a warning, until it is removed."""


def database_url(environ: Mapping[str, str]) -> str:
    """The URL the environment names: ``SLUICE_URL``, or the deprecated ``SLUICE_DB``
    (a warning); both with different values is an error, not a guess."""
    url, old = environ.get(ENV), environ.get(OLD_ENV)
    if old:
        if url and url != old:
            raise ConfigurationError(
                f"{ENV} and {OLD_ENV} name different databases ({shown_url(url)!r} and "
                f"{shown_url(old)!r}): set {ENV} only ({OLD_ENV} is its old name)"
            )
        if not url:
            log.warning("%s is deprecated: name the database with %s, as the CLI reads it",
                        OLD_ENV, ENV)  # fmt: skip
        url = url or old
    if not url:
        raise ConfigurationError(
            f"{ENV} must name the database: a sluice URL such as sqlite:///queues.db"
        )
    return url


def shown_url(url: str) -> str:
    """``url`` as it may be printed: a password in it replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address, bracketed in a URL
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit(parts._replace(netloc=netloc))


def keyless(db: sluice.Database) -> bool:
    """Whether no API key can use ``db``: none was made, or every one is revoked."""
    return all(key.revoked for key in Keys(db).list())


def no_key_warning(url: str) -> str:
    """What a server with keys asked, over a database that has none, says."""
    shown = shown_url(url)
    return (
        f"the database {shown} has no API key (or only revoked ones): every request "
        "will be refused (401). "
        f"Add one with: sluice keys add NAME --admin --db {shlex.quote(shown)}"
    )
