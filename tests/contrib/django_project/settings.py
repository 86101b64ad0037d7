"""Settings of the test project, read from the environment so that ``manage.py
sluice_worker`` in a subprocess and the tests' own process see the same databases.

SLUICE_DJANGO_SQLITE: the Django SQLite database file (DATABASES['default']);
SLUICE_DJANGO_SLUICE: the sluice URL of TASKS['default'] (a SQLite file);
SLUICE_DJANGO_POSTGRES: a PostgreSQL database for DATABASES['postgres'], whose sluice
schema is SLUICE_DJANGO_SCHEMA (TASKS['postgres'] derives its URL from that database);
SLUICE_DJANGO_MAX_ATTEMPTS: both backends' ``max_attempts`` (3).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit

SECRET_KEY = "sluice-tests"
USE_TZ = True
TIME_ZONE = "Europe/Berlin"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["sluice.contrib.django", "tests.contrib.django_project.tasksapp"]
QUEUES = ["default", "emails"]


def postgres_database(url: str) -> dict[str, Any]:
    """DATABASES entry of a ``postgresql://user@host:port/name`` URL."""
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": parts.username or "",
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


def tasks(sluice_url: str, schema: str | None, max_attempts: int = 3) -> dict[str, Any]:
    """TASKS: 'default' on a sluice SQLite file, 'postgres' in Django's PostgreSQL database."""
    found: dict[str, Any] = {
        "default": {
            "BACKEND": "sluice.contrib.django.SluiceBackend",
            "QUEUES": QUEUES,
            "OPTIONS": {"url": sluice_url, "max_attempts": max_attempts},
        }
    }
    if schema is not None:
        found["postgres"] = {
            "BACKEND": "sluice.contrib.django.SluiceBackend",
            "QUEUES": QUEUES,
            "OPTIONS": {"database": "postgres", "schema": schema, "max_attempts": max_attempts},
        }
    return found


DATABASES: dict[str, Any] = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SLUICE_DJANGO_SQLITE", "django.sqlite3"),
    }
}
if os.environ.get("SLUICE_DJANGO_POSTGRES"):
    DATABASES["postgres"] = postgres_database(os.environ["SLUICE_DJANGO_POSTGRES"])

TASKS = tasks(
    os.environ.get("SLUICE_DJANGO_SLUICE", "sqlite:///sluice.db"),
    os.environ.get("SLUICE_DJANGO_SCHEMA") if "postgres" in DATABASES else None,
    int(os.environ.get("SLUICE_DJANGO_MAX_ATTEMPTS", "3")),
)
