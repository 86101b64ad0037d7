"""Long runs: claim latency under a long-held transaction, and queues, topics, rules and HTTP
at once for half an hour a backend (mixed, with its actor processes)."""
