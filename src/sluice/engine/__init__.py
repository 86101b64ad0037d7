"""The queue engine: sessions and leases, transactions, waiting for work."""
