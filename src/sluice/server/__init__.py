"""The sluice server: an HTTP API over any backend for light clients and
administration, with API keys and their grants (docs/server.md)."""
