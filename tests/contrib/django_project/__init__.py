"""A small Django project for sluice's task backend tests (tests/contrib/test_django_*.py)."""
