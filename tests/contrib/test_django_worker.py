"""``manage.py sluice_worker`` as a real process: it runs the project's tasks, stops on
SIGTERM, and a worker killed with SIGKILL mid-task loses nothing (the task runs again in
the next worker and completes), on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django", reason="the 'django' extra is not installed")

from tests.contrib.django_support import ROOT, Stores

pytestmark = pytest.mark.slow


class WorkerProcess:
    """``python -m django sluice_worker`` in the test project, its output in a file."""

    def __init__(self, stores: Stores, alias: str, log: Path, *extra: str) -> None:
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "django", "sluice_worker", "--backend", alias, *extra],
                cwd=ROOT,
                env=stores.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        return self.process.wait(30)


@pytest.fixture
def workers(stores: Stores, alias: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*extra: str) -> WorkerProcess:
        worker = WorkerProcess(stores, alias, tmp_path / f"worker-{len(started)}.log", *extra)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait(30)


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``condition`` (another process's doing: nothing here to wait on) until true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def backend_of(name: str) -> Any:
    from sluice.contrib.django.api import task_backends

    return task_backends[name]


def test_the_worker_command_runs_tasks_and_stops_on_sigterm(
    alias: str, workers: Callable[..., WorkerProcess]
) -> None:
    from sluice.contrib.django.api import TaskResultStatus
    from tests.contrib.django_project.tasksapp import tasks

    results = [tasks.add.using(backend=alias).enqueue(n, n) for n in range(5)]
    failed = tasks.fail.using(backend=alias, queue_name="emails").enqueue("bounced")
    worker = workers("--concurrency", "2")
    backend = backend_of(alias)

    everything: list[Any] = [*results, failed]

    def finished() -> bool:
        return all(backend.get_result(r.id).is_finished for r in everything)

    wait_until(finished, "the worker to finish the tasks")
    assert [backend.get_result(r.id).return_value for r in results] == [0, 2, 4, 6, 8]
    found = backend.get_result(failed.id)
    assert found.status == TaskResultStatus.FAILED
    assert found.errors[0].exception_class is ValueError
    assert found.worker_ids == [f"{os.uname().nodename}:{worker.process.pid}"]
    assert worker.stop() == 0
    output = worker.output
    assert "sluice_worker: 2 thread(s) for queue(s) default, emails" in output
    assert "state=SUCCESSFUL" in output
    assert "state=FAILED" in output
    assert "stopped after 6 task(s), 1 failed" in output


def test_sigint_stops_the_worker_cleanly(alias: str, workers: Callable[..., WorkerProcess]) -> None:
    from tests.contrib.django_project.tasksapp import tasks

    result = tasks.add.using(backend=alias).enqueue(1, 2)
    worker = workers("--queue-name", "default")
    backend = backend_of(alias)
    wait_until(lambda: backend.get_result(result.id).is_finished, "the task")
    assert worker.stop(signal.SIGINT) == 0
    assert "stopped after 1 task(s)" in worker.output


def test_a_worker_killed_mid_task_loses_nothing(
    alias: str, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    from sluice.contrib.django.api import TaskResultStatus
    from tests.contrib.django_project.tasksapp import tasks

    marks = tmp_path / "marks"
    marks.mkdir()
    result = tasks.hold.using(backend=alias).enqueue(str(marks))
    backend = backend_of(alias)
    first = workers()
    wait_until(lambda: list(marks.glob("started-*")), "the first run to start")
    assert backend.get_result(result.id).status == TaskResultStatus.RUNNING
    first.process.kill()  # SIGKILL: no chance to give anything back
    assert first.process.wait(30) == -signal.SIGKILL
    second = workers()
    wait_until(lambda: len(list(marks.glob("started-*"))) == 2, "the task to run again")
    (marks / "release").touch()
    wait_until(lambda: backend.get_result(result.id).is_finished, "the second run to finish")
    found = backend.get_result(result.id)
    assert found.status == TaskResultStatus.SUCCESSFUL
    assert found.return_value == second.process.pid
    assert sorted(p.name for p in marks.glob("started-*")) == sorted(
        f"started-{w.process.pid}" for w in (first, second)
    )
    assert second.stop() == 0


def test_a_task_whose_every_run_was_killed_is_failed_with_runs_used_up(
    alias: str, stores: Stores, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    from django.test import override_settings

    from sluice.contrib.django import RunsUsedUp
    from sluice.contrib.django.api import TaskResultStatus
    from tests.contrib.django_project import settings as project_settings
    from tests.contrib.django_project.tasksapp import tasks

    marks = tmp_path / "marks"
    marks.mkdir()
    stores.env["SLUICE_DJANGO_MAX_ATTEMPTS"] = "1"
    with override_settings(TASKS=project_settings.tasks(stores.sluice_url, stores.schema, 1)):
        result = tasks.hold.using(backend=alias).enqueue(str(marks))
        backend = backend_of(alias)
        first = workers()
        wait_until(lambda: list(marks.glob("started-*")), "the only run to start")
        first.process.kill()
        first.process.wait(30)
        second = workers()
        wait_until(lambda: backend.get_result(result.id).is_finished, "the task to be given up")
        found = backend.get_result(result.id)
        assert found.status == TaskResultStatus.FAILED
        (error,) = found.errors
        assert error.exception_class is RunsUsedUp
        assert "no attempts left after 1 runs" in error.traceback
        assert len(list(marks.glob("started-*"))) == 1  # not run a second time
        assert second.stop() == 0


def test_the_command_refuses_what_it_cannot_run(stores: Stores) -> None:
    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "django", "sluice_worker", *arguments],
            cwd=ROOT,
            env=stores.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    unknown = run("--backend", "nowhere")
    assert unknown.returncode == 1
    assert "no task backend 'nowhere'" in unknown.stderr
    queue = run("--queue-name", "reports")
    assert queue.returncode == 1
    assert "has no queue 'reports'" in queue.stderr
