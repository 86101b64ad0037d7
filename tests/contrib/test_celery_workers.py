"""Real Celery workers (prefork) on the sluice transport, killed with SIGKILL mid-task.

The producer is this process; the workers run ``celery -A tests.contrib.celery_app
worker``. What is checked is what Celery users lose on other brokers
(docs/celery.md): with ``acks_late``, a killed worker's tasks come back at once,
in place, and run to the end on the next worker; a countdown waits in the store,
not in a worker's memory; remote control reaches workers in other processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("celery")

import sluice
import sluice.contrib.kombu
from tests.conftest import url_for
from tests.contrib.celery_app import make_app

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


class Workers:
    """The worker processes of one test, each in its own process group."""

    def __init__(
        self, broker: str, log: Path, tmp: Path, env: dict[str, str] | None = None
    ) -> None:
        self.broker, self.log, self.tmp = broker, log, tmp
        self.env = env or {}
        self.started: list[subprocess.Popen[bytes]] = []

    def start(
        self, name: str, concurrency: int = 2, hold_from: int | None = None
    ) -> subprocess.Popen[bytes]:
        """A worker; with ``hold_from``, it never finishes that task or a later one
        (tests/contrib/celery_app.py), so a kill after they start lands mid-task."""
        env = {
            **os.environ,
            "SLUICE_TEST_BROKER": self.broker,
            "SLUICE_TEST_TASK_LOG": str(self.log),
            "PYTHONPATH": str(ROOT),
            **self.env,
            **({} if hold_from is None else {"SLUICE_TEST_HOLD_FROM": str(hold_from)}),
        }
        with (self.tmp / f"{name}.log").open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tests.contrib.celery_app", "worker",
                 "-P", "prefork", "-c", str(concurrency), "-n", f"{name}@%h", "-l", "info",
                 "--without-heartbeat", "--without-mingle", "--without-gossip"],
                env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.started.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL to the worker and its pool's children at once (as an OOM kill of the
        container, or a lost host, does)."""
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)  # warm shutdown
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()

    def output(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.tmp.glob("w*.log"))


@pytest.fixture(params=["sqlite", "postgresql"])
def broker_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_for(request.param, tmp_path, request)


@pytest.fixture(params=[False, True], ids=["in-process", "consumer-process"])
def consumer_process(request: pytest.FixtureRequest) -> bool:
    """The transport option ``consumer_process``: claims and acks in a process of their own."""
    return bool(request.param)


@pytest.fixture
def workers(broker_url: str, consumer_process: bool, tmp_path: Path) -> Iterator[Workers]:
    options = json.dumps({"consumer_process": consumer_process})
    group = Workers(
        f"sluice+{broker_url}",
        tmp_path / "tasks.log",
        tmp_path,
        env={"SLUICE_TEST_TRANSPORT_OPTIONS": options},
    )
    try:
        yield group
    finally:
        group.stop_all()
        # This process's producer Database goes before the schema or file does.
        sluice.contrib.kombu.close_databases()


def lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def unfinished(rows: list[list[str]]) -> set[str]:
    """The tasks the task log shows started and not done."""
    return {r[1] for r in rows if r[0] == "start"} - {r[1] for r in rows if r[0] == "done"}


def all_done(log: Path, tasks: int) -> Callable[[], bool]:
    """A check that the task log shows each of tasks 0..tasks-1 done."""
    return lambda: {r[1] for r in lines(log) if r[0] == "done"} == {str(n) for n in range(tasks)}


def running_mid_task(log: Path, hold_from: int) -> bool:
    """A task the worker holds (``hold_from`` or later, never finished there) is running:
    a kill now lands mid-task. (Any unfinished task would not do: one about to finish
    could be done before the kill, with the next not yet started, as in a loaded CI run.)"""
    return any(int(n) >= hold_from for n in unfinished(lines(log)))


def wait_until(
    what: str, check: Callable[[], bool], workers: Workers, seconds: float = 120
) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {seconds} s; workers said:\n{workers.output()[-4000:]}")
        time.sleep(0.05)


def settled(db_url: str) -> Callable[[], bool]:
    """A check that Celery's queue holds nothing: every task's message acknowledged. Asked
    while a worker lives: the log's "done" is written by the pool's process before the
    worker's own acknowledges the message (acks_late). A task done by a worker killed in
    between stays claimed by the dead session until a live one's recovery gives it back
    and it runs again (CI: claimed 1 when asked after the stop)."""

    def check() -> bool:
        with sluice.connect(db_url) as db:
            stats = db.queue("celery").stats()
        return stats["ready"] == stats["claimed"] == stats["delayed"] == 0

    return check


def test_tasks_of_a_worker_killed_mid_task_complete_on_the_next(
    broker_url: str, workers: Workers
) -> None:
    producer = make_app(workers.broker)
    # Tasks 0 and 1 finish on the first worker; the ones it starts after them never do
    # there, so the kill lands mid-task even when the test's process is slow to look.
    hold = 2
    first = workers.start("w1", hold_from=hold)
    tasks = 12
    for n in range(tasks):
        producer.send_task("work", args=(n, 0.5))

    wait_until(
        "the first worker running tasks", lambda: running_mid_task(workers.log, hold), workers
    )
    workers.kill(first)
    killed_during = unfinished(lines(workers.log))
    assert killed_during, "the kill was meant to land mid-task"
    workers.start("w2")

    wait_until("every task done after the kill", all_done(workers.log, tasks), workers)
    starts = Counter(r[1] for r in lines(workers.log) if r[0] == "start")
    # The tasks killed mid-run ran again from the start; at least once, never lost.
    assert all(starts[n] >= 2 for n in killed_during)
    wait_until("every task acknowledged", settled(broker_url), workers)


def test_a_countdown_waits_in_the_store_and_remote_control_reaches_workers(
    broker_url: str, workers: Workers
) -> None:
    producer = make_app(workers.broker)
    workers.start("w1", concurrency=1)
    # A ping before the worker bound its remote-control queue reaches nobody: asked
    # again until the worker is up.
    wait_until("a reply to ping", lambda: bool(producer.control.inspect(timeout=1).ping()), workers)
    replies = producer.control.inspect(timeout=5).ping()
    assert replies is not None
    assert list(replies.values()) == [{"ok": "pong"}]
    (node,) = replies
    assert node.startswith("w1@")
    producer.send_task("work", args=(1, 0.0), countdown=3)
    with sluice.connect(broker_url) as db:
        # Not taken by the worker to wait in its memory (no visibility timeout to
        # outlive): delayed in the broker until it is due.
        assert db.queue("celery").stats()["delayed"] == 1
        # Celery's names are kept as they are, escaped reversibly.
        names = {spec.name for spec in db.queues()}
        assert f"{node.replace('@', ':40')}.celery.pidbox" in names
    wait_until("the countdown task done", lambda: ["done", "1"] in lines(workers.log), workers)


def consumer_processes(worker: subprocess.Popen[bytes]) -> list[int]:
    """The pids of the consumer processes in ``worker``'s process group."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            group = os.getpgid(int(entry.name))
        except (OSError, ProcessLookupError):
            continue
        if b"sluice.contrib.kombu.sidecar" in command and group == worker.pid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("consumer_process", [True], ids=["consumer-process"])
def test_a_killed_consumer_process_is_replaced_and_every_task_completes(
    broker_url: str, workers: Workers
) -> None:
    producer = make_app(workers.broker)
    worker = workers.start("w1")
    tasks = 12
    for n in range(tasks):
        producer.send_task("work", args=(n, 0.3))
    wait_until("a task started", lambda: any(r[0] == "start" for r in lines(workers.log)), workers)
    (first,) = consumer_processes(worker)
    os.kill(first, signal.SIGKILL)
    wait_until("another consumer process", lambda: bool(consumer_processes(worker)) and
               consumer_processes(worker) != [first], workers)  # fmt: skip

    wait_until(
        "every task done after the consumer process's kill", all_done(workers.log, tasks), workers
    )
    assert worker.poll() is None, "the worker itself lives on"
    assert f"the consumer process {first} exited" in workers.output()
    wait_until("every task acknowledged", settled(broker_url), workers)


@pytest.mark.parametrize("consumer_process", [True], ids=["consumer-process"])
def test_the_consumer_process_of_a_killed_worker_ends_and_its_tasks_run_on_the_next(
    broker_url: str, workers: Workers
) -> None:
    producer = make_app(workers.broker)
    worker = workers.start("w1")
    tasks = 8
    for n in range(tasks):
        producer.send_task("work", args=(n, 0.5))
    wait_until("a task started", lambda: any(r[0] == "start" for r in lines(workers.log)), workers)
    (sidecar,) = consumer_processes(worker)
    # The worker's main process alone: its pool's children (forked from it) must not keep
    # the socket open, or the consumer process would never see the worker's end.
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    wait_until("the consumer process's end", lambda: not alive(sidecar), workers, seconds=10)
    os.killpg(worker.pid, signal.SIGKILL)  # the orphaned pool processes
    workers.start("w2")

    wait_until("every task done on the next worker", all_done(workers.log, tasks), workers)
    wait_until("every task acknowledged", settled(broker_url), workers)
