"""Fixtures of the Django task backend's tests, shared by their modules (one Django setup
per test process: a session fixture imported into two modules would run twice)."""

from tests.contrib.django_support import alias, django_project, stores

__all__ = ["alias", "django_project", "stores"]
