"""``manage.py sluice_worker``: run the project's Django tasks with sluice's worker runtime.

Threads, adaptive batches, profiles, deadlines and the crash behaviour are sluice's
(docs/jobs.md); this command finds the backend in ``TASKS``, registers the Django runner
for its queues' task types, and works until SIGTERM or SIGINT (Ctrl-C), then lets the
tasks in hand finish for ``--grace`` seconds.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sluice.contrib.django.api import source, task_backends
from sluice.contrib.django.backend import SluiceBackend
from sluice.contrib.django.databases import close_databases
from sluice.urls import shown_url

__all__ = ["Command"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Command(BaseCommand):
    help = "Run the Django tasks of a sluice backend until SIGTERM or Ctrl-C (docs/django.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--backend", default="default", help="the TASKS alias to run (default: default)"
        )
        parser.add_argument(
            "--queue-name",
            action="append",
            dest="queues",
            help="a queue to run (repeat for more; default: all of the backend's QUEUES)",
        )
        parser.add_argument("--concurrency", type=int, default=1, help="worker threads (default 1)")
        parser.add_argument(
            "--batch",
            type=int,
            default=None,
            help="tasks settled per commit (default: adaptive, 1 to 64)",
        )
        parser.add_argument(
            "--grace",
            type=float,
            default=None,
            help="seconds the tasks in hand may finish after SIGTERM (default 30)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = options["backend"]
        try:
            backend = task_backends[alias]
        except ImproperlyConfigured as exc:  # InvalidTaskBackend(Error) is one
            raise CommandError(f"no task backend {alias!r}: {exc}") from exc
        if not isinstance(backend, SluiceBackend):
            raise CommandError(
                f"TASKS[{alias!r}] is {type(backend).__module__}.{type(backend).__name__}, "
                "not sluice.contrib.django.SluiceBackend: name a sluice backend with --backend"
            )
        self._log_to_stderr(int(options["verbosity"]))
        try:
            worker = backend.worker(
                options["queues"],
                concurrency=options["concurrency"],
                batch=options["batch"],
                grace=options["grace"],
            )
        except (ImproperlyConfigured, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        queues = ", ".join(options["queues"] or sorted(backend.queues))
        self.stderr.write(
            f"sluice_worker: {worker.concurrency} thread(s) for queue(s) {queues} of "
            f"TASKS[{alias!r}] ({source}) in {shown_url(backend.url)}; "
            "SIGTERM or Ctrl-C to stop"
        )
        try:
            worker.run()
        finally:
            close_databases()
        done = worker.stats
        self.stderr.write(
            f"sluice_worker: stopped after {done.processed} task(s), {done.failed} failed, "
            f"{done.errors} run(s) that raised or were interrupted"
        )

    def _log_to_stderr(self, verbosity: int) -> None:
        """Tasks started and finished (Django's task loggers) and sluice's worker, for people.

        Only where the project's LOGGING gave those loggers nowhere to go.
        """
        level = logging.DEBUG if verbosity > 1 else logging.INFO
        for name in ("sluice", source):
            logger = logging.getLogger(name)
            if verbosity == 0 or logger.handlers:
                continue
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(_FORMAT))
            logger.addHandler(handler)
            logger.setLevel(level)
            logger.propagate = False
