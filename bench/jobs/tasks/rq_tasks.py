"""The RQ task of the peer benchmark, and the settings module its workers load.

``rq worker -c bench.jobs.tasks.rq_tasks`` reads ``REDIS_URL`` from here, which also
imports this module in the worker before it forks: a forked work horse then finds the task
already imported, as RQ's performance notes advise.
"""

from __future__ import annotations

import os

from bench.jobs.tasks import REDIS_URL_ENV

REDIS_URL = os.environ.get(REDIS_URL_ENV, "redis://127.0.0.1:6379/14")


def noop() -> None:
    """The benchmark's task: it does nothing."""
