"""Failures are visible (issue 39): a failed task run or gateway delivery is logged at
WARNING with which attempt of how many and the error, the last one at ERROR with its
traceback (as Celery does), and the workers and the gateways count every failure where
a timer can read it (``worker.stats``, ``db.gateways.stats``)."""

from __future__ import annotations

import http.server
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import sluice
from sluice.jobs import Task

# --- tasks --------------------------------------------------------------------------


def _records(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name]


def test_a_failing_task_warns_per_run_and_errs_with_its_traceback_at_the_last(
    db: sluice.Database, caplog: pytest.LogCaptureFixture
) -> None:
    @db.task("mail", max_attempts=3, backoff=0.0)
    def mail(task: Task) -> None:
        raise ConnectionRefusedError("smtp.example.org refused")

    task = db.jobs.submit_task("mail", {"to": "ann"})
    worker = db.worker()
    with caplog.at_level(logging.INFO, logger="sluice.worker"):
        worker.run_until_idle()
    told = [(r.levelname, r.getMessage()) for r in _records(caplog, "sluice.worker")]
    error = "ConnectionRefusedError: smtp.example.org refused"
    assert told == [
        ("WARNING", f"task {task} (mail) failed, attempt 1 of 3: {error}; tried again in 0 s"),
        ("WARNING", f"task {task} (mail) failed, attempt 2 of 3: {error}; tried again in 0 s"),
        ("ERROR", f"task {task} (mail) failed, attempt 3 of 3: {error}; no attempts left: it "
                  "is finished as failed, its message moved to 'tasks.mail.failed'"),
        ("INFO", f"task {task} (mail) finished as failed; its message is in 'tasks.mail.failed'"),
    ]  # fmt: skip
    (last,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert last.exc_info is not None
    assert "in mail" in caplog.text  # the traceback reaches into the task's function
    assert (worker.stats.processed, worker.stats.failed, worker.stats.errors) == (1, 1, 3)
    assert worker.processed == 1


def test_a_task_whose_last_run_ended_elsewhere_errs_when_it_is_finished(
    db: sluice.Database, caplog: pytest.LogCaptureFixture
) -> None:
    @db.task("mail", max_attempts=2, backoff=0.0)
    def mail(task: Task) -> None:
        raise RuntimeError("down")

    task = db.jobs.submit_task("mail", None)
    db.worker().run_until_idle(max_tasks=2)  # both runs, in another worker
    caplog.clear()
    finishing = db.worker()
    with caplog.at_level(logging.INFO, logger="sluice.worker"):
        finishing.run_until_idle()
    ((level, text),) = [(r.levelname, r.getMessage()) for r in _records(caplog, "sluice.worker")]
    assert level == "ERROR"
    assert text == (
        f"task {task} (mail) failed: no attempts left after 2 runs (RuntimeError: down); "
        "its message moved to 'tasks.mail.failed'"
    )
    assert (finishing.stats.failed, finishing.stats.errors) == (1, 0)


def test_a_task_failed_on_purpose_warns_once(
    db: sluice.Database, caplog: pytest.LogCaptureFixture
) -> None:
    @db.task("mail")
    def mail(task: Task) -> None:
        task.fail("not an address")

    task = db.jobs.submit_task("mail", "bob")
    worker = db.worker()
    with caplog.at_level(logging.INFO, logger="sluice.worker"):
        worker.run_until_idle()
    assert [(r.levelname, r.getMessage()) for r in _records(caplog, "sluice.worker")] == [
        ("WARNING", f"task {task} (mail) failed: not an address (task.fail: not tried again)")
    ]
    assert (worker.stats.processed, worker.stats.failed, worker.stats.errors) == (1, 1, 0)


# --- gateway deliveries ---------------------------------------------------------------


class _Answers(http.server.BaseHTTPRequestHandler):
    """Answers each POST with the server's next status (the last one repeats)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        server: Any = self.server
        status = server.statuses.pop(0) if len(server.statuses) > 1 else server.statuses[0]
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads sluice's log, not the server's."""


@pytest.fixture
def receiver() -> Iterator[http.server.ThreadingHTTPServer]:
    """A loopback HTTP server; set its ``statuses`` (a list) before delivering."""
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.statuses = [200]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def _outbox(db: sluice.Database, server: http.server.ThreadingHTTPServer, attempts: int) -> None:
    db.create_queue("outbox.errors")
    db.create_queue("outbox", error_queue="outbox.errors")
    url = f"http://127.0.0.1:{server.server_address[1]}/in"
    db.gateways.define("outbox", direction="out", transport="http", url=url, backoff=0,
                       attempts=attempts)  # fmt: skip


def test_a_refused_delivery_errs_with_its_traceback_and_is_counted(
    db: sluice.Database, receiver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.statuses = [400]
    _outbox(db, receiver, attempts=3)
    mid = db.queue("outbox").put({"order": 7})
    with caplog.at_level(logging.INFO, logger="sluice.gateways"):
        assert db.gateways.run_until_idle() == 1
    (record,) = _records(caplog, "sluice.gateways")
    assert record.levelname == "ERROR"
    assert record.exc_info is not None
    text = record.getMessage()
    assert text.startswith(f"gateway 'outbox': message {mid}, try 1 of 3 failed: refused: ")
    assert "HTTP 400" in text
    assert text.endswith("; it would fail again: it becomes an error message")
    stats = db.gateways.stats
    assert (stats.delivered, stats.failed, stats.retries) == (0, 1, 0)
    assert db.queue("outbox.errors").stats()["ready"] == 1


def test_a_try_that_may_pass_warns_and_a_later_delivery_is_counted(
    db: sluice.Database, receiver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.statuses = [503, 200]
    _outbox(db, receiver, attempts=3)
    mid = db.queue("outbox").put({"order": 7})
    with caplog.at_level(logging.INFO, logger="sluice.gateways"):
        assert db.gateways.run_until_idle() == 1
    ((level, text),) = [(r.levelname, r.getMessage()) for r in _records(caplog, "sluice.gateways")]
    assert level == "WARNING"
    assert text.startswith(f"gateway 'outbox': message {mid}, try 1 of 3 failed: ")
    assert text.endswith("; tried again in 0 s")
    stats = db.gateways.stats
    assert (stats.delivered, stats.failed, stats.retries) == (1, 0, 1)
