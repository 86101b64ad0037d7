"""A pause made by another process (the real ``sluice`` command) holds for this one's
very next claim, and that process's resume wakes a consumer blocked here."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import sluice


def _sluice(*args: str, url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sluice.cli", *args, "--db", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _when_waiting(db: sluice.Database) -> threading.Event:
    """An event set when a consumer of ``db`` starts to wait for news."""
    wakeups = db.context.wakeups
    original: Callable[..., None] = wakeups.wait
    waiting = threading.Event()

    def wait(*args: Any, **kwargs: Any) -> None:
        waiting.set()
        original(*args, **kwargs)

    wakeups.wait = wait  # type: ignore[method-assign]
    return waiting


def test_another_process_pauses_and_resumes_a_queue_this_one_consumes(shared_url: str) -> None:
    # Waiters here look again only after a minute: the resume's news must wake them.
    slow = shared_url + "&fallback=60" if shared_url.startswith("postgresql") else shared_url
    with sluice.connect(slow, poll_interval=60) as db:
        orders = db.create_queue("orders")
        orders.put_many(["first", "second"])
        first = orders.get()  # the queue's settings are cached in this process now
        assert first is not None
        first.ack()
        _sluice("pause", "orders", url=shared_url)
        assert orders.get() is None
        assert orders.paused
        got: list[Any] = []
        waiting = _when_waiting(db)
        consumer = threading.Thread(target=lambda: got.append(orders.get(wait=60)))
        consumer.start()
        assert waiting.wait(10)
        _sluice("resume", "orders", url=shared_url)
        consumer.join(30)
        assert not consumer.is_alive(), "the other process's resume did not wake the consumer"
        assert got[0] is not None
        assert got[0].body == "second"
        got[0].ack()
