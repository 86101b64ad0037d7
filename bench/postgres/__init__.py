"""sluice on PostgreSQL against pgqueuer, procrastinate and RabbitMQ on pgqueuer's own
workload, and the idle wake-up latency of a blocked consumer."""
