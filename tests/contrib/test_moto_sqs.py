"""moto's own SQS tests (tests/test_sqs of its sdist), unchanged, against one real
``sluice serve --moto-tests`` process on SQLite, in moto's server mode
(``TEST_SERVER_MODE``: its boto3 clients are pointed at the endpoint, and its reset
route is called before each test).

Every test that fails does so for a difference docs/sqs.md explains; the list below is
exact, so a test that starts to pass, or a new failure, fails this one. Left out:
test_sqs_integration's two Lambda tests (they need moto's Lambda), and the files that
test moto itself rather than SQS (test_server.py: moto's Flask app in-process;
test_sqs_cloudformation.py, test_sqs_multiaccount.py, test_sqs_authentication.py:
CloudFormation, several accounts, IAM).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("moto")
pytest.importorskip("boto3")

from tests.contrib.peers import source
from tests.integration.test_serve import free_port, ready, serve

# Why it failed beside other tests (reproduced with -n 2 beside the Celery tests, in 2 of
# 5 runs: test_receive_message_again_preserves_attributes and
# test_receive_message_with_explicit_visibility_timeout): moto's tests receive, or count,
# right after a visibility timeout ends (VisibilityTimeout=0, or sleep(1.1) after 1 s),
# and the server gave an expired lease's message back only when its reaper thread got to
# it through the event loop, late on loaded cores. Now a receive gives back its queue's
# expired leases itself and a VisibilityTimeout=0 receive its messages at once (0 of 3
# runs failed after). Still timed against the wall clock through the reaper: counts after
# a sleep with 0.5 s to spare, a 2 s long poll a 1 s visibility must end: serial, so
# `make test` runs it alone, before the parallel run.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

FILES = ("test_sqs.py", "test_sqs_message_attributes.py", "test_sqs_integration.py")
LEFT_OUT = (
    "test_sqs_integration.py::test_invoke_function_from_sqs_queue",
    "test_sqs_integration.py::test_invoke_function_from_sqs_fifo_queue",
)

DIFFERENCES = {
    "test_create_queue_with_different_attributes_fail": "FifoQueue 'tru' is refused, as SQS does",
    "test_message_retention_period": "MessageRetentionPeriod 1 is below SQS's 60 s minimum",
    "test_create_queues_in_multiple_region": "one database is one account in every region",
    "test_change_message_visibility_on_old_message": "a stale receipt handle is refused",
    "test_batch_change_message_visibility_on_old_message": "a stale receipt handle is refused",
    "test_delete_message_after_visibility_timeout": "a stale receipt handle is refused",
    "test_delete_message_using_old_receipt_handle": "a stale receipt handle is refused",
    "test_delete_message_batch_with_invalid_receipt_id": "VisibilityTimeout 0: stale at once",
    "test_receive_messages_with_message_group_id": "one message per FIFO group per receive",
    "test_permissions": "AddPermission: UnsupportedOperation (grants are sluice's keys')",
    "test_add_permission_errors": "AddPermission: UnsupportedOperation",
    "test_remove_permission_errors": "RemovePermission: UnsupportedOperation",
}
"""The tests that fail, each for a deliberate difference (docs/sqs.md, moto's suite)."""


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = serve(
        f"sqlite:///{tmp_path / 'moto.db'}", "--no-auth", "--moto-tests", "--port", str(port)
    )
    try:
        ready(base, process)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


def test_motos_sqs_suite_passes_but_for_the_documented_differences(
    endpoint: str, tmp_path: Path
) -> None:
    root = source("moto")
    report = tmp_path / "moto.xml"
    env = {
        **os.environ,
        "TEST_SERVER_MODE": "true",
        "TEST_SERVER_MODE_ENDPOINT": endpoint,
        "AWS_ACCESS_KEY_ID": "moto",
        "AWS_SECRET_ACCESS_KEY": "moto",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    env.pop("PYTHONPATH", None)  # moto's tests import its own `tests` package, not ours
    deselect = [arg for test in LEFT_OUT for arg in ("--deselect", f"tests/test_sqs/{test}")]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         "-p", "no:xdist", "--timeout", "120", f"--junitxml={report}", *deselect,
         *(f"tests/test_sqs/{name}" for name in FILES)],
        cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    passed, failed = [], []
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = {child.tag for child in case}
        if outcome & {"failure", "error"}:
            failed.append(case.attrib["name"])
        elif "skipped" not in outcome:
            passed.append(case.attrib["name"])
    unexplained = sorted(set(failed) - set(DIFFERENCES))
    assert not unexplained, f"{unexplained} failed:\n{done.stdout[-6000:]}"
    assert sorted(set(DIFFERENCES) - set(failed)) == [], "passes now: update docs/sqs.md"
    assert len(passed) >= 138, done.stdout[-3000:]
