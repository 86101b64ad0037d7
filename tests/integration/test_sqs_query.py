"""SQS's query protocol (form-encoded ``Action=...``, answered in XML), as older SDKs and
kombu's asynchronous SQS client speak it: signed by botocore's SigV4Auth, at ``/`` and at
a queue URL, the answers read back by botocore's own query parser for SQS's 2012-11-05
shapes."""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET

import pytest

from tests.integration import sqs_wire
from tests.integration.sqs_wire import Wire

wire = sqs_wire.wire  # the fixture

NS = {"s": "http://queue.amazonaws.com/doc/2012-11-05/"}


def xml(answer: object) -> ET.Element:
    assert getattr(answer, "status_code", None) == 200, getattr(answer, "text", answer)
    return ET.fromstring(getattr(answer, "text", ""))


def test_a_message_through_the_query_protocol(wire: Wire) -> None:
    made = xml(
        wire.form(
            {
                "Action": "CreateQueue",
                "QueueName": "orders",
                "Version": "2012-11-05",
                "Attribute.1.Name": "VisibilityTimeout",
                "Attribute.1.Value": "40",
            }
        )
    )
    url = made.findtext(".//s:QueueUrl", namespaces=NS)
    assert url is not None
    assert url.endswith("/000000000000/orders")
    path = "/000000000000/orders"
    sent = xml(
        wire.form(
            {
                "Action": "SendMessage",
                "MessageBody": "hello",
                "Version": "2012-11-05",
                "MessageAttribute.1.Name": "colour",
                "MessageAttribute.1.Value.DataType": "String",
                "MessageAttribute.1.Value.StringValue": "blue",
            },
            path=path,
        )
    )
    assert (
        sent.findtext(".//s:MD5OfMessageBody", namespaces=NS) == hashlib.md5(b"hello").hexdigest()
    )
    batch = xml(
        wire.form(
            {
                "Action": "SendMessageBatch",
                "QueueUrl": url,
                "SendMessageBatchRequestEntry.1.Id": "a",
                "SendMessageBatchRequestEntry.1.MessageBody": "one",
                "SendMessageBatchRequestEntry.2.Id": "b",
                "SendMessageBatchRequestEntry.2.MessageBody": "two",
            }
        )
    )
    ids = [e.text for e in batch.iterfind(".//s:SendMessageBatchResultEntry/s:Id", NS)]
    assert ids == ["a", "b"]
    got = xml(
        wire.form(
            {
                "Action": "ReceiveMessage",
                "QueueUrl": url,
                "MaxNumberOfMessages": "10",
                "AttributeName.1": "All",
                "MessageAttributeName.1": "All",
            }
        )
    )
    messages = got.findall(".//s:Message", NS)
    assert [m.findtext("s:Body", namespaces=NS) for m in messages] == ["hello", "one", "two"]
    first = messages[0]
    assert first.findtext(".//s:MessageAttribute/s:Value/s:StringValue", namespaces=NS) == "blue"
    counts = {
        a.findtext("s:Name", namespaces=NS): a.findtext("s:Value", namespaces=NS)
        for a in first.iterfind("s:Attribute", NS)
    }
    assert counts["ApproximateReceiveCount"] == "1"
    handles = [m.findtext("s:ReceiptHandle", namespaces=NS) or "" for m in messages]
    deleted = xml(
        wire.form(
            {
                "Action": "DeleteMessageBatch",
                "QueueUrl": url,
                **{
                    f"DeleteMessageBatchRequestEntry.{i}.{k}": v
                    for i, h in enumerate(handles, 1)
                    for k, v in (("Id", f"d{i}"), ("ReceiptHandle", h))
                },
            }
        )
    )
    assert len(deleted.findall(".//s:DeleteMessageBatchResultEntry", NS)) == 3
    assert wire.db.queue("orders").stats()["claimed"] == 0
    attributes = xml(
        wire.form(
            {
                "Action": "GetQueueAttributes",
                "QueueUrl": url,
                "AttributeName.1": "VisibilityTimeout",
            }
        )
    )
    assert attributes.findtext(".//s:Attribute/s:Value", namespaces=NS) == "40"
    listed = xml(wire.form({"Action": "ListQueues"}))
    assert [u.text for u in listed.iterfind(".//s:QueueUrl", NS)] == [url]


def test_query_refusals_are_xml_error_responses(wire: Wire) -> None:
    answer = wire.form({"Action": "GetQueueUrl", "QueueName": "missing"})
    assert answer.status_code == 400
    error = ET.fromstring(answer.text)
    assert error.findtext(".//s:Code", namespaces=NS) == "AWS.SimpleQueueService.NonExistentQueue"
    assert error.findtext(".//s:Type", namespaces=NS) == "Sender"


def test_botocore_parses_the_query_answers(wire: Wire) -> None:
    """botocore's query parser, given SQS's query-era model, reads what the endpoint
    answers: the shapes an SDK of that protocol expects."""
    loaders = pytest.importorskip("botocore.loaders")
    from botocore.model import ServiceModel
    from botocore.parsers import QueryParser

    loader = loaders.create_loader()
    raw = loader.load_service_model("sqs", "service-2")
    # The query-era model wrapped each result in <OpResult>: say so for SendMessage.
    raw["operations"]["SendMessage"]["output"]["resultWrapper"] = "SendMessageResult"
    model = ServiceModel(raw, "sqs")
    parser = QueryParser()
    url = wire.json("CreateQueue", {"QueueName": "jobs"}).json()["QueueUrl"]
    answer = wire.form({"Action": "SendMessage", "QueueUrl": url, "MessageBody": "x"})
    shape = model.operation_model("SendMessage").output_shape
    parsed = parser.parse(
        {"body": answer.content, "headers": dict(answer.headers), "status_code": 200}, shape
    )
    assert parsed["MD5OfMessageBody"] == hashlib.md5(b"x").hexdigest()
    assert parsed["MessageId"]
