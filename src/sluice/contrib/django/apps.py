"""The Django app of sluice's task backend: it brings ``manage.py sluice_worker``."""

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["SluiceConfig"]


class SluiceConfig(AppConfig):
    """``"sluice.contrib.django"`` in INSTALLED_APPS; it has no models."""

    name = "sluice.contrib.django"
    label = "sluice"
    verbose_name = "sluice tasks"
