"""SQLite wake-ups across connections and processes: a commit wakes the others, not itself."""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import sluice
from sluice.backends import sqlite as sqlite_backend
from sluice.backends.sqlite import SQLiteBackend

CHILD = Path(__file__).with_name("wake_child.py")

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def _watchers() -> int:
    return sum(t.name == "sluice-sqlite-watch" for t in threading.enumerate())


@linux
@pytest.mark.slow
def test_a_consumer_in_another_process_wakes_well_within_the_poll(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    rounds = 15
    latencies = []
    with sluice.connect(url) as db:
        db.create_queue("a")
        args = [sys.executable, str(CHILD), url, "a", str(rounds)]
        with subprocess.Popen(args, stdout=subprocess.PIPE, text=True) as child:
            assert child.stdout is not None
            try:
                for n in range(rounds):
                    assert child.stdout.readline().strip() == "ready"
                    time.sleep(0.02)  # for the consumer to block in dequeue
                    db.queue("a").put(n)
                    committed = time.time()
                    held = child.stdout.readline().strip()
                    assert held != "none", "the consumer waited 20 s and got nothing"
                    latencies.append(float(held) - committed)
            finally:
                child.kill()
    # Polling (every 30 s in the child) could not do this; the watcher takes about 1 ms.
    assert statistics.median(latencies) < 0.020, latencies


def _changes(path: Path) -> tuple[SQLiteBackend, threading.Event, list[str | None]]:
    backend = SQLiteBackend(str(path))
    told: list[str | None] = []
    event = threading.Event()

    def callback(queue: str | None) -> None:
        told.append(queue)
        event.set()

    backend.on_change(callback)
    backend.waiting(True)  # as a Database's wake-ups say while a consumer waits
    return backend, event, told


@linux
def test_the_watcher_tells_of_other_connections_commits_only(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}") as db:
        db.create_queue("a")
    before = _watchers()  # Databases other tests keep open (Spark's, say) have theirs
    watched, event, told = _changes(tmp_path / "q.db")
    other = SQLiteBackend(str(tmp_path / "q.db"))
    try:
        assert not watched.polled_for_changes
        session = watched.open_session("here", 1, 30.0)
        watched.heartbeat(session)  # its own commits: nothing to tell
        other.open_session("there", 2, 30.0)
        assert event.wait(10)
        # News of any queue; a loaded machine may split one commit's WAL writes over two
        # checks, so it may be told twice.
        assert told
        assert set(told) == {None}
    finally:
        other.close()
        watched.close()
    assert _watchers() == before


def test_without_a_watcher_waiters_poll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_backend, "watch", lambda *args: None)  # as on macOS
    url = f"sqlite:///{tmp_path / 'q.db'}"
    before = _watchers()  # Databases other tests keep open (Spark's, say) have theirs
    with sluice.connect(url) as producer, sluice.connect(url, poll_interval=0.01) as consumer:
        assert consumer.backend.polled_for_changes
        assert _watchers() == before
        producer.create_queue("a")
        got: list[object] = []
        waiting = threading.Event()

        def consume() -> None:
            waiting.set()
            m = consumer.queue("a").get(wait=10)
            assert m is not None
            got.append(m.body)
            m.ack()

        thread = threading.Thread(target=consume)
        thread.start()
        waiting.wait()
        producer.queue("a").put("polled")
        thread.join(10)
        assert got == ["polled"]
