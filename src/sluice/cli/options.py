"""The options every ``sluice`` command shares, given before or after the command: which
database (``--db``, ``SLUICE_URL``), ``--json``, and how much it logs; and the progress line
long-running commands print."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType

from sluice.urls import ENV, environment_url, shown_url

__all__ = [
    "DEFAULT_URL",
    "LONG_RUNNING",
    "Adder",
    "Progress",
    "Target",
    "add_global_options",
    "add_progress_option",
    "configure_logging",
    "target",
]

Adder = Callable[[str, Callable[..., int], str], argparse.ArgumentParser]
"""Adds a command: its name, the function that runs it, its help text; its parser (each
command module's ``add_commands(add)`` is given one by the root, sluice.cli.app)."""

DEFAULT_URL = "sqlite:///sluice.db"

LONG_RUNNING = frozenset({"worker", "run", "serve", "dropbox", "pipeline", "tail"})
"""Commands that run until stopped: they log at INFO by default, the others at WARNING."""

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

log = logging.getLogger("sluice.cli")


def add_global_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """``--db``, ``--json`` and the log options, on the top parser and on each command's.

    On a command's parser (``after_command``) they default to nothing at all, so that a value
    given before the command (``sluice --db q.db queues``) is not overwritten by the
    command's default.
    """

    def default(value: object) -> object:
        return argparse.SUPPRESS if after_command else value

    parser.add_argument(
        "--db",
        default=default(None),
        help=f"database URL or SQLite path (env {ENV}; default {DEFAULT_URL})",
    )
    parser.add_argument(
        "--json", action="store_true", default=default(False), help="print JSON for scripts"
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=_LEVELS,
        default=default(None),
        help="what to log on stderr (default INFO for commands that run until stopped, "
        "else WARNING)",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=default(0), help="log more (DEBUG)"
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="count",
        default=default(0),
        help="log less (-q: warnings, -qq: errors)",
    )


@dataclass(frozen=True, slots=True)
class Target:
    """The database a command uses and where that choice came from."""

    url: str
    source: str
    """``--db``, the environment variable's name, or ``default``."""

    @property
    def explicit(self) -> bool:
        return self.source != "default"

    def describe(self) -> str:
        """The database for a person: its URL without a password."""
        return shown_url(self.url)


def target(args: argparse.Namespace, default: str = DEFAULT_URL) -> Target:
    """The database of ``args``: ``--db``, else ``SLUICE_URL`` (sluice.urls), else ``default``."""
    from_env = environment_url(os.environ)  # checked even under --db: a conflict is a mistake
    if getattr(args, "db", None):
        return Target(args.db, "--db")
    if from_env:
        return Target(from_env, ENV)
    return Target(default, "default")


def configure_logging(args: argparse.Namespace) -> None:
    """Send logs to stderr at the level the options ask for.

    sluice's own loggers log at that level; other libraries' only from WARNING up unless
    ``--log-level DEBUG``, so that ``-v`` shows sluice's detail and not py4j's.
    """
    if args.log_level:
        level = logging.getLevelNamesMapping()[args.log_level]
    elif args.quiet:
        level = logging.WARNING if args.quiet == 1 else logging.ERROR
    elif args.verbose:
        level = logging.DEBUG
    elif args.command in LONG_RUNNING:
        level = logging.INFO
    else:
        level = logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level if args.log_level == "DEBUG" else max(level, logging.WARNING))
    logging.getLogger("sluice").setLevel(level)


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--progress SECONDS``: how often a long-running command logs its counters."""
    parser.add_argument(
        "--progress",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="log a progress line this often, at INFO (default 10; 0: only at the end)",
    )


class Progress:
    """Logs a line of counters every ``every`` seconds while a long command works, and a last
    one when it stops: ``processed 12,400 (1,230/s), errors 3``.

    ``counters`` is read from the progress thread: it must be cheap and thread-safe (plain
    integer attributes are). The rate is of ``rate_of``, over the last interval.
    """

    def __init__(
        self,
        what: str,
        counters: Callable[[], Mapping[str, int]],
        *,
        every: float,
        rate_of: str = "processed",
    ) -> None:
        self._what = what
        self._counters = counters
        self._every = every
        self._rate_of = rate_of
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sluice-progress", daemon=True)
        self._last = (time.monotonic(), 0)

    def line(self) -> str:
        """The counters now, with the rate since the previous line."""
        counts = dict(self._counters())
        now, count = time.monotonic(), counts.get(self._rate_of, 0)
        then, before = self._last
        self._last = (now, count)
        rate = (count - before) / (now - then) if now > then else 0.0
        parts = [f"{k} {v:,}" + (f" ({rate:,.0f}/s)" if k == self._rate_of else "")
                 for k, v in counts.items()]  # fmt: skip
        return f"{self._what}: " + ", ".join(parts)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            log.info(self.line())

    def __enter__(self) -> Progress:
        if self._every > 0:
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        log.info(self.line())
