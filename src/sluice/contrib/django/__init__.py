"""Django's task framework on sluice: ``TASKS`` backend ``sluice.contrib.django.SluiceBackend``.

Serves ``django.tasks`` (Django 6) and the ``django-tasks`` backport (Django 5.2) alike;
add ``"sluice.contrib.django"`` to ``INSTALLED_APPS`` for ``manage.py sluice_worker``
(docs/django.md). Needs the ``django`` extra, named where it is missing.
"""

from __future__ import annotations

from sluice.extras import require

require("django", "sluice's Django task backend (sluice.contrib.django)")

from sluice.contrib.django.backend import SluiceBackend  # noqa: E402  (after the check above)
from sluice.contrib.django.databases import close_databases  # noqa: E402
from sluice.contrib.django.records import RunsUsedUp  # noqa: E402

__all__ = ["RunsUsedUp", "SluiceBackend", "close_databases"]
