"""``sluice run --engine spark`` and ``sluice pipeline --follow`` stopped by SIGTERM or
Ctrl-C while messages flow in: exit 0 with the summary line, no traceback, and every
message processed exactly once over the stopped run and the run after it.

Each command runs as an operator runs it, a process of its own with its JVM, on a
queue a thread here keeps filling once the command is processing; the signal goes once
outputs of that flow appear in the database (the query is then processing micro-batch
after micro-batch). Ctrl-C goes to the whole process group, as a terminal sends it: the
JVM and Spark's Python workers get it too.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import sluice

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 240.0
PER_BATCH = 200
"""Small micro-batches: the signal lands in one, or between two, as in steady running."""

RULES = """
CREATE QUEUE orders; CREATE QUEUE billing; CREATE QUEUE audit;
CREATE RULE route FOR orders IF body.total > 0 THEN
    ENQUEUE json_object('order', body.id) INTO billing
  ELSE ENQUEUE json_object('order', body.id) INTO audit;
CREATE RULE bill FOR billing IF true THEN ENQUEUE json_object('billed', body.order) INTO audit;
"""
"""Two processed queues, so that a micro-batch has two transactions: one audit message
per order, in one of two ways."""


class Inflow:
    """Orders put into a queue: the first 20 at once, then (``start``) 20 every 50 ms from
    a thread, until stopped. The flow starts once the command is processing: started with
    it, it piled up thousands of orders while the JVM started, which the second run then
    took a minute and more to drain, 200 a micro-batch."""

    def __init__(self, url: str, queue: str) -> None:
        self.sent = 0
        self._url, self._queue = url, queue
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._feed, daemon=True)
        with sluice.connect(url) as db:
            self._put(db)

    def _put(self, db: sluice.Database) -> None:
        n = self.sent
        db.queue(self._queue).put_many([{"id": i, "total": i % 5 - 1} for i in range(n, n + 20)])
        self.sent = n + 20

    def start(self) -> None:
        self._thread.start()

    def _feed(self) -> None:
        with sluice.connect(self._url) as db:
            while not self._done.wait(0.05):  # the pace of the inflow, not a wait for an event
                self._put(db)

    def stop(self) -> int:
        """Stop putting; how many orders went in."""
        self._done.set()
        if self._thread.ident is not None:
            self._thread.join()
        return self.sent


@pytest.fixture
def inflow() -> Iterator[list[Inflow]]:
    """Where a test keeps its Inflow, stopped at the end whatever happened."""
    made: list[Inflow] = []
    yield made
    for flow in made:
        flow.stop()


def _start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # a session of its own: Ctrl-C goes to its group
        return subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", *command],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _when(ready: Callable[[], bool], process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + DEADLINE
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            _kill(process)
            pytest.fail(f"no output before the signal; its log:\n{log.read_text()[-4000:]}")
        time.sleep(0.05)


def _ended(process: subprocess.Popen[bytes], log: Path, *, aborts: bool = False) -> str:
    """``process``'s output, once it exited 0 with no traceback. ``aborts``: Spark may
    log the batch a stop interrupted (the pipeline's sink aborts it, to be replayed)."""
    try:
        code = process.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        _kill(process)
        pytest.fail(f"it did not stop; its log:\n{log.read_text()[-4000:]}")
    output = log.read_text()
    assert code == 0, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    assert "py4j" not in output.lower(), output[-4000:]
    if not aborts:
        assert " ERROR " not in output, output[-4000:]  # Spark's log: a query that failed
    return output


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _stop(process: subprocess.Popen[bytes], how: str) -> None:
    if how == "ctrl-c":
        os.killpg(process.pid, signal.SIGINT)  # as a terminal sends it: the whole group
    else:
        process.send_signal(signal.SIGTERM)  # as kill(1) and systemd's main process get it


def _processed(output: str) -> int:
    (count,) = re.findall(r"(\d+) message\(s\) processed", output)
    return int(count)


@pytest.mark.parametrize(
    ("shared_url", "how"),
    [
        ("sqlite", "sigterm"),
        ("postgresql", "ctrl-c"),
    ],
    indirect=["shared_url"],
)
def test_sluice_run_on_spark_stops_cleanly_and_processes_each_message_once(
    shared_url: str, how: str, tmp_path: Path, inflow: list[Inflow]
) -> None:
    with sluice.connect(shared_url) as db:
        db.apply(RULES)
        checkpoint = str(tmp_path / "ck")
        common = ["run", "--db", shared_url, "--engine", "spark", "--master", "local[2]",
                  "--checkpoint", checkpoint, "--max-per-batch", str(PER_BATCH)]  # fmt: skip
        flow = Inflow(shared_url, "orders")
        inflow.append(flow)
        log = tmp_path / "first.log"
        first = _start(common, log)
        _when(lambda: len(db.queue("audit")) > 0, first, log)  # processing the first orders
        flow.start()
        _when(lambda: len(db.queue("audit")) > 20, first, log)  # and the flow's
        _stop(first, how)
        stopped = _ended(first, log)
        # The summary, after which a background thread may still log (a recovery it ran).
        assert any(line.startswith("sluice run: stopped after ") for line in stopped.splitlines())
        sent = inflow[0].stop()

        second_log = tmp_path / "second.log"
        rest = _ended(_start([*common, "--once"], second_log), second_log)
        audit = [m.body for m in db.queue("audit").browse(limit=2 * sent)]
        billed = sorted(b["billed"] for b in audit if "billed" in b)
        refused = sorted(b["order"] for b in audit if "order" in b)
        assert billed == [n for n in range(sent) if n % 5 - 1 > 0]  # each once: none twice
        assert refused == [n for n in range(sent) if n % 5 - 1 <= 0]
        for queue in ("orders", "billing"):
            assert len(db.queue(queue)) == 0, f"{queue}: left unprocessed"
        # Each order and each billing message processed by one of the two runs, once.
        assert _processed(stopped) + _processed(rest) == sent + len(billed)
        assert _processed(stopped) > 0
    if shared_url.startswith("sqlite"):  # the file that two Spark runs beside an inflow share
        path = shared_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


PIPELINE_SQL = "SELECT to_json(named_struct('n', body.id)) AS body FROM messages"


@pytest.mark.parametrize("shared_url", ["sqlite"], indirect=True)
def test_sluice_pipeline_follow_stops_cleanly_and_delivers_each_message_once(
    shared_url: str, tmp_path: Path, inflow: list[Inflow]
) -> None:
    url = shared_url
    with sluice.connect(url) as db:
        db.create_queue("orders")
        db.create_queue("out")
        common = ["pipeline", "orders", "--db", url, "--name", "router", "--master", "local[2]",
                  "--checkpoint", str(tmp_path / "ck"), "--sql", PIPELINE_SQL,
                  "--body-schema", "id BIGINT", "--target", "out",
                  "--max-per-batch", str(PER_BATCH)]  # fmt: skip
        flow = Inflow(url, "orders")
        inflow.append(flow)
        log = tmp_path / "first.log"
        first = _start([*common, "--follow"], log)
        _when(lambda: len(db.queue("out")) > 0, first, log)  # processing the first orders
        flow.start()
        _when(lambda: len(db.queue("out")) > 20, first, log)  # and the flow's
        _stop(first, "sigterm")
        assert "; stopped" in _ended(first, log, aborts=True)
        sent = inflow[0].stop()

        second_log = tmp_path / "second.log"
        _ended(_start(common, second_log), second_log)
        out = sorted(m.body["n"] for m in db.queue("out").browse(limit=2 * sent))
        assert out == list(range(sent))
        assert len(db.queue("orders")) == 0
