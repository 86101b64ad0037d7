"""The declarative rules engine against the same logic written with sluice's Python API:
routing, Demaq's procurement and wake-up latency, on SQLite and PostgreSQL, and on Spark."""
