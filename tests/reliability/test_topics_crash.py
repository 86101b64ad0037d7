"""kill -9 of a topic's consumer and publisher: per subscription nothing lost or doubled."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import sluice

CHILD = Path(__file__).with_name("topics_child.py")

pytestmark = pytest.mark.slow


def _drain(db: sluice.Database, name: str) -> list[object]:
    got = []
    while (m := db.queue(name).get()) is not None:
        got.append(m.body)
        m.ack()
    return got


def test_kill_9_of_a_consumer_and_publisher_loses_and_doubles_nothing(shared_url: str) -> None:
    url = shared_url
    with sluice.connect(url) as db:
        topic = db.create_topic("events")
        db.subscribe("events", "a", window=4)
        db.subscribe("events", "b", where="body.n <> 1")
        topic.put_many([{"n": n} for n in range(6)])
    with (
        subprocess.Popen(
            [sys.executable, str(CHILD), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        ) as child,
        sluice.connect(url) as observer,
    ):  # fmt: skip
        assert child.stdout is not None
        report = json.loads(child.stdout.readline())
        assert report["taken"] == [{"n": 0}, {"n": 1}, {"n": 2}]
        assert "mine" in {s.name for s in observer.subscriptions()}
        # While the child lives, its claims are held and its publishes invisible.
        assert observer.queue("a").stats()["claimed"] == 3
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert observer.recover() == [report["session"]]
        assert observer.recover() == []  # exactly once
        # The non-durable subscription ended with its session.
        assert sorted(s.name for s in observer.subscriptions()) == ["a", "b"]
        after = observer.queue("a").browse()
        everything = [*({"n": n} for n in range(6)), {"n": 100}]
        assert [m.body for m in after] == everything
        assert [m.attempts for m in after] == [1, 1, 1, 0, 0, 0, 0]
        assert _drain(observer, "a") == everything
        assert _drain(observer, "b") == [m for m in everything if m["n"] != 1]
        observer.queue("events").put({"n": 200})
        assert _drain(observer, "a") == [{"n": 200}]
        assert _drain(observer, "b") == [{"n": 200}]
        observer.recover()
        assert observer.queue("events").stats()["ready"] == 0
