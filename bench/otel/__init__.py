"""What telemetry costs: put and get messages in-process with telemetry off, on, and on
the commit before the engine had its observer seam (docs/observability.md)."""
