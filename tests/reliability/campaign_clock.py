"""Run a module as ``python -m`` does, with a ``time.sleep`` that libfaketime leaves working.

The campaign steps its SQLite actors' wall clock with libfaketime, leaving their
monotonic clock alone (FAKETIME_DONT_FAKE_MONOTONIC). libfaketime 0.9.10 (Debian 12's)
still rewrites an absolute deadline given to ``clock_nanosleep`` as if it were wall-clock
time when the clock is CLOCK_MONOTONIC, and passes the kernel a negative one
(wolfcw/libfaketime#426, fixed after 0.9.10). Python 3.11's ``time.sleep`` sleeps to such
a deadline, so under the preload every ``time.sleep`` raised OSError EINVAL, at any offset,
+0 included. No machine does that: the campaign reported the preload's flaw as sluice's
(a 500 from sluice serve, whose acknowledgements pause 200 µs for company).

Here ``time.sleep`` waits in ``select`` instead, whose relative timeout libfaketime leaves
as it is. Nothing else changes: the wall clock is stepped as before, and the monotonic
clock, lock and condition timeouts and the event loop's waits were never touched.
"""

from __future__ import annotations

import runpy
import select
import sys
import time
from typing import SupportsIndex

__all__ = ["sleep"]


def sleep(seconds: float | SupportsIndex) -> None:
    """``time.sleep``: at least ``seconds`` of the monotonic clock."""
    wait = float(seconds)  # as time.sleep takes it: a float or an index
    if wait < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        select.select([], [], [], left)


def main() -> None:
    time.sleep = sleep  # before the module, and whatever it imports, binds it
    module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
