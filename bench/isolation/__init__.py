"""Isolation levels and exclusive consumers: what they cost a draining consumer, on SQLite
and PostgreSQL, against RabbitMQ's single active consumer."""
