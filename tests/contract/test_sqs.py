"""The SQS endpoint (docs/sqs.md) driven by boto3, a client no one here wrote, against a
real uvicorn server on SQLite and PostgreSQL, with keys checked by Signature Version 4."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice.clock import ManualClock
from sluice.server.grants import Grant, Keys
from sluice.server.signing import SigningKey
from tests.live_server import serve

boto3 = pytest.importorskip("boto3")
ClientError = pytest.importorskip("botocore.exceptions").ClientError


class Endpoint:
    def __init__(self, db: sluice.Database, url: str, keys: Keys) -> None:
        self.db, self.url, self.keys = db, url, keys

    def client(self, name: str, secret: str) -> Any:
        return boto3.client("sqs", endpoint_url=self.url, region_name="us-east-1",
                            aws_access_key_id=name, aws_secret_access_key=secret)  # fmt: skip


@pytest.fixture
def endpoint(shared_url: str, tmp_path: Path) -> Iterator[Endpoint]:
    from sluice.server.app import create_app

    signing = SigningKey.generate(tmp_path / "signing.key")
    with sluice.connect(shared_url, clock=ManualClock(1_700_000_000.0)) as db:
        keys = Keys(db, signing=signing)
        with serve(create_app(db, signing=signing)) as url:
            yield Endpoint(db, url, keys)


@pytest.fixture
def sqs(endpoint: Endpoint) -> Any:
    return endpoint.client("admin", endpoint.keys.add("admin", [], admin=True))


def code(exc: pytest.ExceptionInfo[Exception]) -> str:
    return str(exc.value.response["Error"]["Code"])  # type: ignore[attr-defined]


def test_send_receive_delete(endpoint: Endpoint, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    assert url.endswith("/000000000000/orders")
    attrs = {"colour": {"DataType": "String", "StringValue": "blue"},
             "n": {"DataType": "Number", "StringValue": "7"},
             "raw": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}  # fmt: skip
    sent = sqs.send_message(QueueUrl=url, MessageBody="hello", MessageAttributes=attrs)
    assert sent["MD5OfMessageBody"] == hashlib.md5(b"hello").hexdigest()
    assert len(sent["MD5OfMessageAttributes"]) == 32  # botocore checks it against its own
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"],
                              AttributeNames=["All"], VisibilityTimeout=30)["Messages"]  # fmt: skip
    assert [m["Body"] for m in got] == ["hello"]
    assert got[0]["MessageAttributes"]["raw"]["BinaryValue"] == b"\x00\x01"
    assert got[0]["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert got[0]["Attributes"]["ApproximateReceiveCount"] == "1"
    # An ordinary sluice queue: sluice sees the message held, with its attributes.
    assert endpoint.db.queue("orders").stats()["claimed"] == 1
    assert sqs.receive_message(QueueUrl=url).get("Messages") is None
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    # Again (a retry whose first answer was lost): it succeeds, as SQS's does.
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    with pytest.raises(ClientError) as made_up:
        sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")
    assert code(made_up) == "ReceiptHandleIsInvalid"
    assert endpoint.db.queue("orders").stats()["claimed"] == 0


def test_visibility_timeout_returns_the_message(endpoint: Endpoint, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="work", Attributes={"VisibilityTimeout": "5"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="job")
    (first,) = sqs.receive_message(QueueUrl=url)["Messages"]
    clock = endpoint.db.clock
    assert isinstance(clock, ManualClock)
    clock.advance(6)  # the lease's reaper gives it back on the database's clock
    counted = ["ApproximateReceiveCount"]
    (again,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5,
                                   AttributeNames=counted)["Messages"]  # fmt: skip
    assert again["Body"] == "job"
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    with pytest.raises(ClientError) as stale:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    assert code(stale) == "ReceiptHandleIsInvalid"
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"],
                                  VisibilityTimeout=0)  # fmt: skip
    (third,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])


def test_batches_and_attributes(endpoint: Endpoint, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="b")["QueueUrl"]
    done = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "a", "MessageBody": "1"}, {"Id": "b", "MessageBody": "2", "DelaySeconds": 60},
        {"Id": "c", "MessageBody": "3", "DelaySeconds": 901}])  # fmt: skip
    assert [e["Id"] for e in done["Successful"]] == ["a", "b"]
    assert [e["Code"] for e in done["Failed"]] == ["InvalidParameterValue"]
    shown = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert shown["ApproximateNumberOfMessages"] == "1"
    assert shown["ApproximateNumberOfMessagesDelayed"] == "1"
    assert shown["VisibilityTimeout"] == "30"
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": "x", "ReceiptHandle": got[0]["ReceiptHandle"]},
        {"Id": "y", "ReceiptHandle": "nonsense"}])  # fmt: skip
    assert [e["Id"] for e in deleted["Successful"]] == ["x"]
    assert [e["Code"] for e in deleted["Failed"]] == ["ReceiptHandleIsInvalid"]
    with pytest.raises(ClientError) as empty:
        sqs.send_message_batch(QueueUrl=url, Entries=[])
    assert code(empty) == "AWS.SimpleQueueService.EmptyBatchRequest"
    sqs.tag_queue(QueueUrl=url, Tags={"team": "shop"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "shop"}
    sqs.purge_queue(QueueUrl=url)
    with pytest.raises(ClientError) as again:
        sqs.purge_queue(QueueUrl=url)
    assert code(again) == "AWS.SimpleQueueService.PurgeQueueInProgress"
    assert sqs.list_queues(QueueNamePrefix="b")["QueueUrls"] == [url]
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(ClientError) as gone:
        sqs.get_queue_url(QueueName="b")
    assert code(gone) == "AWS.SimpleQueueService.NonExistentQueue"


def test_a_batch_delete_settles_its_handles_together(endpoint: Endpoint, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="many")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": str(n), "MessageBody": str(n)} for n in range(8)])  # fmt: skip
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(int(m["Body"]) for m in got) == list(range(8))
    handles = [m["ReceiptHandle"] for m in got]
    # The entries run at once, answered in their order; a handle given twice deletes
    # once and succeeds twice (as a retried DeleteMessage does), and a stale one fails
    # alone.
    entries = [{"Id": f"e{n}", "ReceiptHandle": h} for n, h in enumerate(handles)]
    entries.insert(3, {"Id": "again", "ReceiptHandle": handles[0]})
    entries.append({"Id": "bad", "ReceiptHandle": "nonsense"})
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=entries)
    assert [e["Id"] for e in deleted["Successful"]] == [
        e["Id"] for e in entries if e["Id"] != "bad"]  # fmt: skip
    assert [(e["Id"], e["Code"]) for e in deleted["Failed"]] == [("bad", "ReceiptHandleIsInvalid")]
    stats = endpoint.db.queue("many").stats()
    assert stats["claimed"] == stats["ready"] == 0


def test_fifo_groups_and_deduplication(endpoint: Endpoint, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="f.fifo", Attributes={
        "FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]  # fmt: skip
    one = sqs.send_message(QueueUrl=url, MessageBody="a1", MessageGroupId="a")
    dup = sqs.send_message(QueueUrl=url, MessageBody="a1", MessageGroupId="a")
    assert dup["MessageId"] == one["MessageId"]
    sqs.send_message(QueueUrl=url, MessageBody="a2", MessageGroupId="a")
    sqs.send_message(QueueUrl=url, MessageBody="b1", MessageGroupId="b")
    assert endpoint.db.queue("f.fifo").stats()["ready"] == 3  # the duplicate was not stored
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    # An in-flight message holds its group: a1 and b1, not a2.
    assert sorted(m["Body"] for m in got) == ["a1", "b1"]
    with pytest.raises(ClientError) as no_group:
        sqs.send_message(QueueUrl=url, MessageBody="x")
    assert code(no_group) == "MissingParameter"


def _create_at_once(endpoint: Endpoint, name: str, timeouts: list[str]) -> list[str]:
    """CreateQueue ``name`` from one client per visibility timeout, all at once: each
    one's QueueUrl, or its error code."""
    secret = endpoint.keys.add(f"maker-{name}", [], admin=True)
    clients = [endpoint.client(f"maker-{name}", secret) for _ in timeouts]
    start = threading.Barrier(len(timeouts))
    answers: list[str] = [""] * len(timeouts)

    def create(i: int) -> None:
        start.wait()
        try:
            attributes = {"VisibilityTimeout": timeouts[i]}
            answers[i] = clients[i].create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        except ClientError as exc:
            answers[i] = str(exc.response["Error"]["Code"])

    threads = [threading.Thread(target=create, args=(i,)) for i in range(len(timeouts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


def test_creates_of_one_queue_at_once_all_succeed(endpoint: Endpoint, sqs: Any) -> None:
    # Found by Celery's SQS test: a worker and its producer declare "celery" at the same
    # moment; the second found the queue made and its attributes not yet written, and
    # compared its own with SQS's defaults (QueueAlreadyExists).
    for n in range(8):
        name = f"together{n}"
        answers = _create_at_once(endpoint, name, ["6"] * 4)
        assert answers == [answers[0]] * 4, answers
        assert answers[0].endswith(f"/{name}")
        got = sqs.get_queue_attributes(QueueUrl=answers[0], AttributeNames=["VisibilityTimeout"])
        assert got["Attributes"]["VisibilityTimeout"] == "6"


def test_creates_of_one_queue_at_once_that_differ_keep_one(endpoint: Endpoint, sqs: Any) -> None:
    for n in range(4):
        name = f"apart{n}"
        answers = _create_at_once(endpoint, name, ["5", "7"])
        made = [a for a in answers if a.endswith(f"/{name}")]
        assert len(made) == 1, answers  # one made it, the other was told it differs
        assert "QueueNameExists" in answers or "QueueAlreadyExists" in answers
        got = sqs.get_queue_attributes(QueueUrl=made[0], AttributeNames=["VisibilityTimeout"])
        assert got["Attributes"]["VisibilityTimeout"] == ["5", "7"][answers.index(made[0])]


def test_a_queue_dropped_outside_sqs_is_made_again_afresh(endpoint: Endpoint, sqs: Any) -> None:
    attributes = {"VisibilityTimeout": "5"}
    url = sqs.create_queue(QueueName="again", Attributes=attributes, tags={"team": "a"})["QueueUrl"]
    endpoint.db.drop_queue("again")  # sluice's own drop: its SQS record goes with it
    again = sqs.create_queue(QueueName="again", Attributes={"VisibilityTimeout": "9"})
    assert again["QueueUrl"] == url
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])
    assert got["Attributes"]["VisibilityTimeout"] == "9"
    assert sqs.list_queue_tags(QueueUrl=url).get("Tags", {}) == {}


def test_redrive_policy_is_an_error_queue(endpoint: Endpoint, sqs: Any) -> None:
    dlq = sqs.create_queue(QueueName="dead")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]
    policy = json.dumps({"deadLetterTargetArn": arn["QueueArn"], "maxReceiveCount": 1})
    url = sqs.create_queue(QueueName="src", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    spec = endpoint.db.context.spec("src")
    assert (spec.error_queue, spec.max_attempts) == ("dead", 1)
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [url]
    sqs.send_message(QueueUrl=url, MessageBody="poison")
    (m,) = sqs.receive_message(QueueUrl=url)["Messages"]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"],
                                  VisibilityTimeout=0)  # fmt: skip
    (dead,) = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=5)["Messages"]
    assert dead["Body"] == "poison"


def test_keys_signatures_and_grants(endpoint: Endpoint, sqs: Any) -> None:
    sqs.create_queue(QueueName="private")
    url = sqs.create_queue(QueueName="shop")["QueueUrl"]
    secret = endpoint.keys.add("shop", [Grant.parse("shop:produce")])
    shop = endpoint.client("shop", secret)
    shop.send_message(QueueUrl=url, MessageBody="ok")
    with pytest.raises(ClientError) as denied:
        shop.receive_message(QueueUrl=url)
    assert code(denied) == "AccessDenied"
    assert shop.list_queues()["QueueUrls"] == [url]  # it sees only its own
    with pytest.raises(ClientError) as forged:
        endpoint.client("shop", secret + "x").send_message(QueueUrl=url, MessageBody="no")
    assert code(forged) == "SignatureDoesNotMatch"
    with pytest.raises(ClientError) as unknown:
        endpoint.client("nobody", secret).list_queues()
    assert code(unknown) == "InvalidClientTokenId"
    endpoint.keys.revoke("shop")
    clock = endpoint.db.clock
    assert isinstance(clock, ManualClock)
    clock.advance(2)  # another Keys revoked it: the server's memory of it lasts a second
    with pytest.raises(ClientError) as revoked:
        shop.send_message(QueueUrl=url, MessageBody="no")
    assert code(revoked) == "InvalidClientTokenId"
    assert endpoint.db.queue("shop").stats()["ready"] == 1
