"""A thread that ends what the server holds (leases, transactions) when it expires,
waiting for the next expiry or a change instead of polling."""

from __future__ import annotations

import threading
from collections.abc import Callable

from sluice.clock import Clock

__all__ = ["Reaper"]


class Reaper:
    """Calls ``expire()`` whenever the earliest of ``next_expiry()`` comes (the clock's
    time; None: nothing held). ``changed`` guards what those read: notify it whenever
    an expiry is added or moved."""

    def __init__(
        self,
        name: str,
        clock: Clock,
        changed: threading.Condition,
        next_expiry: Callable[[], float | None],
        expire: Callable[[], int],
    ) -> None:
        self._clock = clock
        self._changed = changed
        self._next = next_expiry
        self._expire = expire
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._changed:
                if self._stopped:
                    return
                first = self._next()
                if first is None:
                    self._changed.wait()
                else:
                    wait = self._clock.real_seconds(first - self._clock.now())
                    if wait > 0:
                        self._changed.wait(wait)
                if self._stopped:
                    return
            self._expire()
