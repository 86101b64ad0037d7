"""The optional parts of sluice and the one way each is checked: by name, where it is first needed.

sluice is installed from PyPI as ``sluice-queue`` (the name ``sluice`` there belongs to another
project); the import name stays ``sluice``. Every message that tells a user to install an extra
is written here, so that none names the wrong distribution.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

from sluice.errors import MissingDependency

__all__ = ["DISTRIBUTION", "EXTRAS", "install_hint", "load", "missing", "require"]

DISTRIBUTION = "sluice-queue"
"""The name to install sluice by (``pip install sluice-queue``); ``import sluice`` is unchanged."""

EXTRAS: dict[str, tuple[str, ...]] = {
    "postgres": ("psycopg", "psycopg_pool"),
    "server": ("fastapi", "uvicorn", "httpx", "prometheus_client", "jinja2"),
    "spark": ("pyspark", "pyarrow"),
    "xml": ("lxml",),
    "mail": ("aiosmtpd",),
    "pydantic": ("pydantic",),
    "celery": ("kombu",),  # the kombu transport needs kombu alone; Celery is its user
    "sqs": ("cryptography",),  # the signing key that keeps API keys' secrets (SigV4)
    "otel": ("opentelemetry.trace", "opentelemetry.metrics"),  # sluice.contrib.otel
    # Django's task API: django.tasks on Django 6, the django-tasks backport before it (its
    # absence is told by sluice.contrib.django.api, which knows which one is needed).
    "django": ("django",),
}
"""Each extra and the modules it brings, as ``pyproject.toml`` declares them."""


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'sluice-queue[xml]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing(extra: str) -> tuple[str, ...]:
    """The modules of ``extra`` that cannot be imported (none: the extra is installed)."""
    return tuple(m for m in EXTRAS[extra] if not _importable(m))


def _importable(module: str) -> bool:
    # Imported already is importable (kombu swaps its module for a lazy one whose
    # __spec__ is None, which find_spec refuses), unless blocked with None, as the
    # import system itself reads sys.modules (and the tests block an extra).
    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingDependency` naming ``extra`` unless all its modules can be imported.

    ``what`` says who needs it, in the reader's words ("XML bodies", "sluice pipeline"). Only
    the modules' presence is checked (no import), so this is cheap enough for every call site.
    """
    absent = missing(extra)
    if absent:
        raise MissingDependency(
            f"{what} needs the '{extra}' extra, which is not installed "
            f"(no module {', '.join(repr(m) for m in absent)}): {install_hint(extra)}"
        )


def load(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` of ``extra``, or raise :class:`MissingDependency` naming the extra."""
    require(extra, what)
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # installed but broken (a wrong version, a missing library)
        raise MissingDependency(
            f"{what} needs the '{extra}' extra, and importing {module} failed ({exc}): "
            f"{install_hint(extra)}"
        ) from exc
