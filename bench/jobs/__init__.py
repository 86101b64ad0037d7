"""No-op tasks through worker processes: sluice on SQLite and PostgreSQL against Celery,
Dramatiq and RQ on Redis and procrastinate; the peers' task modules are in ``tasks``."""
