"""Celery on sluice (SQLite, PostgreSQL) against Celery on Redis (``appendfsync always``),
RabbitMQ (durable queues, publisher confirms) and kombu's SQLAlchemy transport: tasks/s,
latency, and tasks lost or run twice when workers are killed (issue 42)."""
