"""Storage backends: the small queue-level protocol and its SQLite and in-memory forms."""
