"""Resident memory of a worker and of a Spark stream draining a large backlog, and the bounds
that tests/reliability/test_memory.py holds on smaller ones (with the same probe)."""

__all__ = ["SPARK_BOUND_MB", "WORKER_BOUND_MB"]

WORKER_BOUND_MB = 200
"""A worker process draining any backlog stays under this resident size (tests assert it)."""
SPARK_BOUND_MB = 2_500
"""A Spark stream (local[2], the driver's JVM and Python workers together) reading a
backlog of any size, in micro-batches of 10,000, stays under this resident size."""
