"""Credit across processes: consumers in several processes never hold more than the cap."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import sluice

CHILD = Path(__file__).with_name("credit_child.py")
MESSAGES = 300
CAP = 3

pytestmark = pytest.mark.slow


def test_consumers_in_two_processes_never_exceed_the_cap_together(shared_url: str) -> None:
    url = shared_url + ("?synchronous=NORMAL" if shared_url.startswith("sqlite") else "")
    with sluice.connect(url) as db:
        db.create_queue("in", max_in_flight=CAP).put_many([{"n": n} for n in range(MESSAGES)])
        db.create_queue("done")
    children = [
        subprocess.Popen(
            [sys.executable, str(CHILD), url, str(CAP), str(seed), "3"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in range(2)
    ]
    most = [int(child.communicate(timeout=300)[0]) for child in children]
    assert [child.returncode for child in children] == [0, 0], most
    # The cap was reached, so it was what held the consumers back.
    assert max(most) == CAP
    with sluice.connect(url) as db:
        with db.transaction() as tx:
            receipts = Counter(m.body["n"] for m in tx.dequeue("done", limit=MESSAGES + 1))
        assert receipts == Counter(range(MESSAGES))
        assert db.queue("in").stats()["ready"] == 0
