"""Celery workers (prefork) over kombu's own SQS transport, ``sqs://``, pointed at a real
``sluice serve`` process: the second path from Celery to sluice, with no sluice code in
the worker (docs/sqs.md, "kombu and Celery").

The key is a sluice key with grants, kept under the server's signing key, so every
request of kombu's two SQS clients (botocore's, and its own asynchronous one over pycurl)
is checked by Signature Version 4. What is checked is SQS's semantics, which are the
ones Celery users get from Amazon: tasks run, a countdown task runs after its countdown,
and a worker killed with SIGKILL mid-task has its task run again by the next worker once
the message's visibility timeout is over (not at once, as on the sluice transport:
tests/contrib/test_celery_workers.py).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

pytest.importorskip("celery")
pytest.importorskip("pycurl")  # kombu 5.7's SQS transport: its asynchronous HTTP client
pytest.importorskip("boto3")

import sluice
from sluice.server.grants import Grant, Keys
from sluice.server.signing import SigningKey
from tests.conftest import url_for
from tests.contrib.celery_app import make_app
from tests.contrib.test_celery_workers import (
    Workers,
    all_done,
    lines,
    running_mid_task,
    settled,
    unfinished,
    wait_until,
)
from tests.integration.test_serve import free_port, ready, serve

pytestmark = pytest.mark.slow

VISIBILITY = 6
"""The visibility timeout given to kombu (seconds): how long a killed worker's task waits
before the next worker may take it. Longer than any task here runs or waits (the 2 s
countdown, which the worker holds received meanwhile), with room for a loaded machine."""

TRANSPORT_OPTIONS = {
    "region": "us-east-1",
    "is_secure": False,
    "visibility_timeout": VISIBILITY,
    "wait_time_seconds": 1,  # long polling, short so that a stopping worker stops soon
    "polling_interval": 0.1,
}


class Endpoint:
    def __init__(self, db_url: str, port: int, secrets: dict[str, str]) -> None:
        self.db_url, self.port, self.secrets = db_url, port, secrets

    def broker_of(self, key: str) -> str:
        return f"sqs://{key}:{quote(self.secrets[key], safe='')}@127.0.0.1:{self.port}"

    @property
    def broker(self) -> str:
        return self.broker_of("worker")


@pytest.fixture(params=["sqlite", "postgresql"])
def endpoint(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Endpoint]:
    db_url = url_for(request.param, tmp_path, request)
    signing = SigningKey.generate(tmp_path / "signing.key")
    with sluice.connect(db_url) as db:
        keys = Keys(db, signing=signing)
        secrets = {
            "worker": keys.add("worker", [Grant.parse("celery*:produce,consume,manage")]),
            # Without manage: it cannot create queues, so it names them (predefined_queues).
            "plain": keys.add("plain", [Grant.parse("celery*:produce,consume")]),
        }
    port = free_port()
    process = serve(db_url, "--port", str(port), "--signing-key", str(tmp_path / "signing.key"))
    try:
        ready(f"http://127.0.0.1:{port}", process)
        yield Endpoint(db_url, port, secrets)
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


@pytest.fixture
def workers(endpoint: Endpoint, tmp_path: Path) -> Iterator[Workers]:
    env = {"SLUICE_TEST_TRANSPORT_OPTIONS": json.dumps(TRANSPORT_OPTIONS)}
    group = Workers(endpoint.broker, tmp_path / "tasks.log", tmp_path, env)
    try:
        yield group
    finally:
        group.stop_all()


def test_tasks_and_a_countdown_run(endpoint: Endpoint, workers: Workers) -> None:
    producer = make_app(endpoint.broker, TRANSPORT_OPTIONS)
    workers.start("w1")
    for n in range(6):
        producer.send_task("work", args=(n, 0.0))
    sent = time.monotonic()
    producer.send_task("work", args=(100, 0.0), countdown=2)
    wait_until("the countdown task done", lambda: ["done", "100"] in lines(workers.log), workers)
    assert time.monotonic() - sent >= 2
    done = [r[1] for r in lines(workers.log) if r[0] == "done"]
    assert sorted(done, key=int) == [*map(str, range(6)), "100"]
    # Celery's queue is an ordinary sluice queue, made through SQS's CreateQueue.
    wait_until("every task acknowledged", settled(endpoint.db_url), workers)


def test_a_task_killed_mid_run_runs_again_after_its_visibility_timeout(
    endpoint: Endpoint, workers: Workers
) -> None:
    producer = make_app(endpoint.broker, TRANSPORT_OPTIONS)
    # Tasks 0 and 1 finish on the first worker, the later ones it starts never do there:
    # the kill lands mid-task however slow the test's process is to look.
    hold = 2
    first = workers.start("w1", hold_from=hold)
    tasks = 6
    for n in range(tasks):
        producer.send_task("work", args=(n, 0.5))

    wait_until(
        "the first worker running tasks", lambda: running_mid_task(workers.log, hold), workers
    )
    workers.kill(first)
    killed_at = time.monotonic()
    killed_during = unfinished(lines(workers.log))
    assert killed_during, "the kill was meant to land mid-task"
    workers.start("w2")

    def rerun() -> bool:
        return any(
            n in killed_during
            for n, k in Counter(r[1] for r in lines(workers.log) if r[0] == "start").items()
            if k >= 2
        )

    wait_until("a killed task started again", rerun, workers)
    # Not at once: the dead worker's receive held its messages for their visibility
    # timeout (which began at the receive, under a second before the kill).
    assert time.monotonic() - killed_at >= VISIBILITY - 1.5

    wait_until("every task done after the kill", all_done(workers.log, tasks), workers)
    starts = Counter(r[1] for r in lines(workers.log) if r[0] == "start")
    # The tasks killed mid-run ran again from the start, on the next worker.
    assert all(starts[n] >= 2 for n in killed_during)
    reran = [n for n in killed_during if ["done", n] in lines(workers.log)]
    assert sorted(reran) == sorted(killed_during)
    wait_until("every task acknowledged", settled(endpoint.db_url), workers)


def test_predefined_queues_need_no_manage_grant(endpoint: Endpoint, tmp_path: Path) -> None:
    """kombu's ``predefined_queues``: the queue URLs given, so kombu neither lists nor
    creates queues, and a key that may only produce and consume runs the worker."""
    import boto3

    admin = boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{endpoint.port}",
                         region_name="us-east-1", aws_access_key_id="worker",
                         aws_secret_access_key=endpoint.secrets["worker"])  # fmt: skip
    url = admin.create_queue(QueueName="celery")["QueueUrl"]
    assert url == f"http://127.0.0.1:{endpoint.port}/000000000000/celery"
    options = {**TRANSPORT_OPTIONS, "predefined_queues": {"celery": {"url": url}}}
    env = {"SLUICE_TEST_TRANSPORT_OPTIONS": json.dumps(options)}
    group = Workers(endpoint.broker_of("plain"), tmp_path / "tasks.log", tmp_path, env)
    try:
        producer = make_app(endpoint.broker_of("plain"), options)
        group.start("w1")
        producer.send_task("work", args=(7, 0.0))
        wait_until("the task done", lambda: ["done", "7"] in lines(group.log), group)
    finally:
        group.stop_all()
    # Without the queue named, the same key is refused CreateQueue (AccessDenied).
    from botocore.exceptions import ClientError

    plain = boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{endpoint.port}",
                         region_name="us-east-1", aws_access_key_id="plain",
                         aws_secret_access_key=endpoint.secrets["plain"])  # fmt: skip
    with pytest.raises(ClientError) as refused:
        plain.create_queue(QueueName="celery-other")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
