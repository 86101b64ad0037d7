"""Stopping a streaming query on SIGTERM or Ctrl-C, with no Spark call in a signal handler.

A Python signal handler runs in the main thread between two bytecodes, which may be in
the middle of a py4j call (``awaitTermination``): a py4j call from the handler then
re-enters that call's connection and fails with a py4j traceback. So the handler only
sets an event, and the main thread, waiting in short steps, stops the query itself.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Final

__all__ = ["POLL", "await_query", "stop_on_signals", "until_idle"]

POLL: Final = 0.5
"""Seconds between two looks at the stop event while a query runs."""


def stop_on_signals(stop: threading.Event | None = None) -> threading.Event:
    """An event set by SIGTERM and SIGINT from now on (``stop``, or a new one).

    Installed after the Spark session started: the SparkContext installs its own SIGINT
    handler, which cancels every job (a micro-batch's half-done evaluation among them)
    and raises KeyboardInterrupt wherever the main thread is.
    """
    event = stop or threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return event


def await_query(query: Any, stop: threading.Event, poll: float = POLL) -> bool:
    """Wait until ``query`` ends or ``stop`` is set; True if it ended. A query that
    failed raises its StreamingQueryException here, as ``awaitTermination`` does."""
    while not stop.is_set():
        if query.awaitTermination(poll):
            return True
    return False


def until_idle(query: Any, stop: threading.Event, poll: float = POLL) -> bool:
    """``query.processAllAvailable()`` unless ``stop`` is set first; True if it returned.

    processAllAvailable cannot time out, so it runs in a thread of its own (py4j gives
    the thread its own JVM thread) while this one watches ``stop``; stopping the query
    ends it. What it raises is raised here."""
    done = threading.Event()
    failed: list[BaseException] = []

    def work() -> None:
        try:
            query.processAllAvailable()
        except BaseException as exc:  # handed to the waiting thread
            failed.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=work, name="sluice-spark-idle", daemon=True)
    thread.start()
    while not done.wait(poll):
        if stop.is_set():
            return False
    if failed:
        raise failed[0]
    return True
