"""Bad input to the SQS endpoint: each refused with SQS's own error code (JSON ``__type``
and ``x-amzn-query-error``), never a 500, and nothing stored."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from tests.integration import sqs_wire
from tests.integration.sqs_wire import Wire

freezegun = pytest.importorskip("freezegun")

wire = sqs_wire.wire  # the fixture

JSON = {"X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"}


def refused(answer: Any, code: str, status: int = 400) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["x-amzn-query-error"].split(";")[0] == code, answer.text
    assert json.loads(answer.text)["__type"].startswith("com.amazonaws.sqs#")


def nothing_stored(wire: Wire, queue: str = "q") -> None:
    counts = wire.db.queue(queue).stats()
    assert counts["ready"] + counts["delayed"] + counts["pending"] == 0, counts


def test_signatures_wrong_missing_or_expired_are_refused(wire: Wire) -> None:
    body = b"{}"
    refused(wire.post(body, JSON, sign=False), "MissingAuthenticationToken", 403)
    forged = wire.signed(body, JSON, secret=wire.secret + "x")
    refused(wire.client.post("/", content=body, headers=forged), "SignatureDoesNotMatch", 403)
    tampered = wire.signed(body, JSON)
    refused(
        wire.client.post("/", content=b'{"x":1}', headers=tampered), "SignatureDoesNotMatch", 403
    )
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=20)
    with freezegun.freeze_time(past):
        old = wire.signed(body, JSON)
    refused(wire.client.post("/", content=body, headers=old), "RequestExpired")
    garbled = {**wire.signed(body, JSON), "Authorization": "AWS4-HMAC-SHA256 nonsense"}
    answer = wire.client.post("/", content=body, headers=garbled)
    assert answer.status_code in (400, 403), answer.text
    assert answer.headers["x-amzn-query-error"]


def test_unknown_targets_and_actions(wire: Wire) -> None:
    refused(wire.json("Frobnicate", {}), "InvalidAction")
    other = {
        "X-Amz-Target": "DynamoDB_20120810.ListTables",
        "Content-Type": "application/x-amz-json-1.0",
    }
    refused(wire.post(b"{}", other), "UnknownOperationException")
    answer = wire.form({"Action": "Frobnicate", "Version": "2012-11-05"})
    assert answer.status_code == 400
    assert "<Code>InvalidAction</Code>" in answer.text
    answer = wire.form({"Version": "2012-11-05"})
    assert answer.status_code == 400
    assert "<Code>MissingAction</Code>" in answer.text


@pytest.mark.parametrize("body", [b"{", b"[1, 2]", b"\xff\xfe", b'"text"', b"{" * 100_000], ids=str)
def test_malformed_json_is_a_serialization_exception(wire: Wire, body: bytes) -> None:
    refused(wire.json("ListQueues", body), "SerializationException")


def test_malformed_forms(wire: Wire) -> None:
    wire.json("CreateQueue", {"QueueName": "q"})
    body = b"Action=SendMessage&QueueUrl=/000000000000/q&MessageBody=%ff%fe"
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    answer = wire.post(body, headers)
    assert answer.status_code == 400, answer.text
    assert "<Code>MalformedQueryString</Code>" in answer.text
    answer = wire.form(
        {
            "Action": "SendMessageBatch",
            "QueueUrl": "/000000000000/q",
            "SendMessageBatchRequestEntry.x.Id": "a",
        }
    )
    assert answer.status_code == 400
    assert "<Code>MalformedQueryString</Code>" in answer.text
    nothing_stored(wire)


def test_oversized_bodies_and_batches(wire: Wire) -> None:
    url = wire.json("CreateQueue", {"QueueName": "q"}).json()["QueueUrl"]
    big = "x" * (1024 * 1024 + 1)
    refused(
        wire.json("SendMessage", {"QueueUrl": url, "MessageBody": big}), "InvalidParameterValue"
    )
    small = wire.json(
        "CreateQueue", {"QueueName": "small", "Attributes": {"MaximumMessageSize": "1024"}}
    ).json()
    two = [{"Id": f"m{i}", "MessageBody": "y" * 600} for i in range(2)]
    refused(
        wire.json("SendMessageBatch", {"QueueUrl": small["QueueUrl"], "Entries": two}),
        "AWS.SimpleQueueService.BatchRequestTooLong",
    )
    eleven = [{"Id": f"m{i}", "MessageBody": "z"} for i in range(11)]
    refused(
        wire.json("SendMessageBatch", {"QueueUrl": url, "Entries": eleven}),
        "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
    )
    refused(
        wire.json("SendMessageBatch", {"QueueUrl": url, "Entries": []}),
        "AWS.SimpleQueueService.EmptyBatchRequest",
    )
    # Past the server's request limit (max_request): refused before it is read, 413.
    answer = wire.json("SendMessage", {"QueueUrl": url, "MessageBody": "w" * (5 * 1024 * 1024)})
    assert answer.status_code == 413
    nothing_stored(wire)
    nothing_stored(wire, "small")


BAD_ATTRIBUTES: list[tuple[Any, str]] = [
    ({"a": {"DataType": "Number", "StringValue": "not a number"}}, "InvalidParameterValue"),
    ({"a": {"DataType": "Binary", "BinaryValue": "!!not base64"}}, "InvalidParameterValue"),
    ({"a": {"DataType": "Colour", "StringValue": "blue"}}, "InvalidParameterValue"),
    ({"a": {"DataType": "String"}}, "InvalidParameterValue"),
    ({"a": "blue"}, "InvalidParameterValue"),
    ({"AWS.x": {"DataType": "String", "StringValue": "v"}}, "InvalidParameterValue"),
    (
        {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)},
        "InvalidParameterValue",
    ),
    ([1, 2], "InvalidParameterValue"),
]


@pytest.mark.parametrize(("attributes", "code"), BAD_ATTRIBUTES)
def test_bad_message_attributes(wire: Wire, attributes: Any, code: str) -> None:
    url = wire.json("CreateQueue", {"QueueName": "q"}).json()["QueueUrl"]
    sent = {"QueueUrl": url, "MessageBody": "m", "MessageAttributes": attributes}
    refused(wire.json("SendMessage", sent), code)
    nothing_stored(wire)


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"MessageBody": 7}, "InvalidParameterValue"),
        ({"MessageBody": ""}, "InvalidParameterValue"),
        ({"MessageBody": "\x00"}, "InvalidMessageContents"),
        ({}, "MissingParameter"),
        ({"MessageBody": "m", "DelaySeconds": "soon"}, "InvalidParameterValue"),
        ({"MessageBody": "m", "DelaySeconds": 901}, "InvalidParameterValue"),
        ({"MessageBody": "m", "DelaySeconds": True}, "InvalidParameterValue"),
    ],
)
def test_bad_message_parameters(wire: Wire, params: dict[str, Any], code: str) -> None:
    url = wire.json("CreateQueue", {"QueueName": "q"}).json()["QueueUrl"]
    refused(wire.json("SendMessage", {"QueueUrl": url, **params}), code)
    nothing_stored(wire)


@pytest.mark.parametrize(
    ("attributes", "code"),
    [
        ({"VisibilityTimeout": "forever"}, "InvalidAttributeValue"),
        ({"VisibilityTimeout": 43201}, "InvalidAttributeValue"),
        ({"DelaySeconds": ["1"]}, "InvalidAttributeValue"),
        ({"Colour": "blue"}, "InvalidAttributeName"),
        ({"RedrivePolicy": "{not json"}, "InvalidAttributeValue"),
        ({"RedrivePolicy": '{"maxReceiveCount": 3}'}, "InvalidParameterValue"),
        ("VisibilityTimeout=5", "InvalidParameterValue"),
    ],
)
def test_bad_queue_attributes_make_no_queue(wire: Wire, attributes: Any, code: str) -> None:
    refused(wire.json("CreateQueue", {"QueueName": "q", "Attributes": attributes}), code)
    assert [s.name for s in wire.db.queues()] == []


def test_bad_names_and_urls(wire: Wire) -> None:
    refused(wire.json("CreateQueue", {"QueueName": "has space"}), "InvalidParameterValue")
    refused(wire.json("CreateQueue", {"QueueName": 7}), "InvalidParameterValue")
    refused(wire.json("CreateQueue", {}), "MissingParameter")
    refused(
        wire.json("SendMessage", {"QueueUrl": "/000000000000/none", "MessageBody": "m"}),
        "AWS.SimpleQueueService.NonExistentQueue",
    )
    refused(
        wire.json("DeleteMessage", {"QueueUrl": 7, "ReceiptHandle": "h"}), "InvalidParameterValue"
    )
    assert [s.name for s in wire.db.queues()] == []
