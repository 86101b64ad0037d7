"""``sluice serve`` against the in-process API, RabbitMQ's management API and a bare Starlette
route; its server processes (procs) and clients serve the gateways and soak families too."""
