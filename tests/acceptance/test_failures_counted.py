"""The summaries of ``sluice run`` and ``sluice worker`` count every failure (issue 39):
a gateway delivery the other side refused, a task that failed."""

from __future__ import annotations

import http.server
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sluice


class _Refuses(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(400)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def refusing() -> Iterator[str]:
    """The URL of a loopback HTTP server that answers every POST 400."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/in"
    server.shutdown()
    server.server_close()
    thread.join()


def _arrives(db: sluice.Database, queue: str) -> sluice.Message | None:
    """The first message of ``queue``, waited for (another process puts it), left there."""
    tx = db.transaction()
    try:
        taken = tx.dequeue(queue, wait=60)
        return taken[0] if taken else None
    finally:
        tx.abort()


def _stopped(command: subprocess.Popen[str]) -> str:
    command.send_signal(signal.SIGTERM)
    _, err = command.communicate(timeout=60)
    assert command.returncode == 0, err
    return err


def test_sluice_run_counts_a_refused_delivery(tmp_path: Path, refusing: str) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    with sluice.connect(url) as db:
        db.create_queue("outbox.errors")
        db.create_queue("outbox", error_queue="outbox.errors")
        db.gateways.define("outbox", direction="out", transport="http", url=refusing)
        db.queue("outbox").put({"order": 7})
        with subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", "run", "--db", url],
            stderr=subprocess.PIPE, text=True,
        ) as run:  # fmt: skip
            arrived = _arrives(db, "outbox.errors")
            err = _stopped(run)
    assert arrived is not None, err
    (summary,) = [line for line in err.splitlines() if "stopped after" in line]
    assert "1 error(s)" in summary
    assert summary.endswith("; gateways: 0 delivered, 1 failed")


APP = """
import sluice

db = sluice.connect({url!r})


@db.task("mail", max_attempts=2, backoff=0)
def mail(task):
    raise ConnectionRefusedError("smtp.example.org refused")
"""


def test_sluice_worker_counts_failed_tasks_and_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    (tmp_path / "mailapp.py").write_text(APP.format(url=url))
    with sluice.connect(url) as db:
        db.jobs.define("mail", max_attempts=2, backoff=0)
        db.jobs.submit_task("mail", "ann")
        with subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", "worker", "mailapp:db"],
            cwd=tmp_path, stderr=subprocess.PIPE, text=True,
        ) as worker:  # fmt: skip
            arrived = _arrives(db, "tasks.mail.failed")
            err = _stopped(worker)
    assert arrived is not None, err
    assert "stopped after 1 task(s), 1 failed, 2 failed run(s)" in err
