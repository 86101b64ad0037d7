"""What every actor of the fault campaign shares (campaign_child.py, campaign_http.py):
its reports on stdout, and the report of what killed it. Imports nothing of sluice, so
that the HTTP clients stay programs that know only HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable

__all__ = ["run", "say"]


def say(**event: object) -> None:
    """One report, a JSON object a line, flushed at once: a SIGKILL loses only the line
    being written, which the campaign skips."""
    print(json.dumps(event), flush=True)


def run(main: Callable[[], None]) -> None:
    """``main``, and if it raises, what it died of for the campaign's tally, then the
    traceback (the campaign reads both)."""
    try:
        main()
    except Exception as exc:
        kind = type(exc)
        say(died=f"{kind.__module__}.{kind.__qualname__}", message=repr(exc)[:300])
        raise
