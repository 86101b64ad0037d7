"""Long-running commands show their work (issue 39): the worker's failures reach stderr
with their traceback at the last attempt, each long command ends with a counts line, and
--log-level/-q change what is shown."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import sluice

APP = """
import sluice

db = sluice.connect({url!r})


@db.task("mail", max_attempts=2, backoff=0.0)
def mail(task):
    raise ConnectionRefusedError("smtp.example.org refused")
"""


def _worker(tmp_path: Path, *options: str) -> tuple[int, str]:
    db_path = tmp_path / "jobs.db"
    (tmp_path / "mailapp.py").write_text(APP.format(url=f"sqlite:///{db_path}"))
    with sluice.connect(f"sqlite:///{db_path}") as db:
        db.jobs.define("mail", max_attempts=2, backoff=0.0)
        db.jobs.submit_task("mail", {"to": "ann"})
        failed = db.queue("tasks.mail.failed")
        with subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", *options, "worker", "mailapp:db"],
            cwd=tmp_path, stderr=subprocess.PIPE, text=True,
        ) as worker:  # fmt: skip
            give_up = time.monotonic() + 60
            while failed.stats()["ready"] == 0 and time.monotonic() < give_up:
                time.sleep(0.05)  # another process's progress: looked at, not signalled
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=60)
    return worker.returncode, err


def test_a_failing_task_is_shown_with_its_traceback(tmp_path: Path) -> None:
    code, err = _worker(tmp_path)
    assert code == 0, err
    assert "WARNING sluice.worker: task" in err
    assert "failed, attempt 1 of 2: ConnectionRefusedError: smtp.example.org refused" in err
    assert "ERROR   sluice.worker: task" in err
    assert "Traceback (most recent call last)" in err  # at the last attempt, as Celery
    assert 'raise ConnectionRefusedError("smtp.example.org refused")' in err
    assert "sluice worker: processed 1" in err  # the progress line at the end
    assert "stopped after 1 task(s), 1 failed, 2 failed run(s)" in err


def test_quiet_hides_the_warnings_and_keeps_the_errors(tmp_path: Path) -> None:
    code, err = _worker(tmp_path, "-qq")
    assert code == 0, err
    assert "WARNING" not in err
    assert "ERROR   sluice.worker" in err


def test_dropbox_refuses_a_queue_that_does_not_exist(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    with sluice.connect(str(db)) as database:
        database.create_queue("orders")
    result = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "dropbox", "--root", str(tmp_path / "boxes"),
         "--in", "ordrs", "--db", str(db)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "queue 'ordrs' does not exist (did you mean 'orders'?)" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "boxes").exists()  # nothing was made
