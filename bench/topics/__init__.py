"""sluice topics (1, 10, 100 subscriptions) against a plain queue and RabbitMQ's fanout, on
SQLite and PostgreSQL, and where a subscription's consumer spends its time."""
