"""The task modules that the peer workers of ``bench.jobs.peers`` import: one no-op task each.

The workers run as subprocesses; ``bench.jobs.peers`` tells them where the broker is through
the environment: ``BENCH_REDIS_URL`` (Celery, Dramatiq, RQ) and ``BENCH_PG_DSN``
(procrastinate). Without them a module falls back to the servers of the benchmark machine.
"""

from __future__ import annotations

__all__ = ["PG_DSN_ENV", "QUEUE", "REDIS_URL_ENV"]

REDIS_URL_ENV = "BENCH_REDIS_URL"
PG_DSN_ENV = "BENCH_PG_DSN"
QUEUE = "bench"
