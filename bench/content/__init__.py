"""Content-aware queuing on a queue of typed orders: selective dequeue, priority functions
and the plain-queue alternative, on SQLite and PostgreSQL."""
