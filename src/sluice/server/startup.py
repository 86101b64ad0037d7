"""What a server says and reads as it starts: the database's URL from the environment
(``SLUICE_URL``, as the CLI reads it), and a warning when no API key could use it."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

import sluice
from sluice.errors import ConfigurationError
from sluice.server.grants import Keys
from sluice.urls import ENV, OLD_ENV, environment_url, shown_url

__all__ = ["ENV", "OLD_ENV", "database_url", "keyless", "no_key_warning", "shown_url"]


def database_url(environ: Mapping[str, str]) -> str:
    """The URL the environment names (sluice.urls.environment_url); an error if none."""
    url = environment_url(environ)
    if not url:
        raise ConfigurationError(
            f"{ENV} must name the database: a sluice URL such as sqlite:///queues.db"
        )
    return url


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
