"""A dropbox consumer process for tests/contract/test_dropbox_processes.py.

    python -m tests.contract.dropbox_child URL ROOT QUEUE CONSUMER [CRASH]

Ingests everything in the queue's target/ (after recovering its own processing/),
prints the number stored and exits. CRASH kills the process with SIGKILL at a step:
``claimed`` after its first claim into processing/, ``committed`` after its first
commit and before the file is moved on.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import sluice
from sluice.dropbox import Dropbox, inbound


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    url, root, queue, consumer, *crash = sys.argv[1:]
    db = sluice.connect(url)
    box = Dropbox(db, root, consumer_id=consumer)
    if crash == ["claimed"]:
        claim = inbound.Inbound._claim

        def claim_then_die(self: inbound.Inbound, *args: Any) -> Any:
            found = claim(self, *args)
            if found is not None:
                _die()
            return found

        inbound.Inbound._claim = claim_then_die  # type: ignore[method-assign,assignment]
    elif crash == ["committed"]:

        def die_before_processed(*args: Any, **kwargs: Any) -> None:
            _die()

        inbound.Inbound._processed = die_before_processed  # type: ignore[method-assign]
    stored = box.recover(queue) + box.ingest(queue)
    print(stored, flush=True)
    db.close()


if __name__ == "__main__":
    main()
