"""SQS's two wire protocols: JSON (``X-Amz-Target: AmazonSQS.<Op>``,
``application/x-amz-json-1.0``: what botocore and the current SDKs send) and the older
query protocol (form-encoded ``Action=<Op>``, answered in XML: older SDKs, kombu's async
client). A request becomes an operation's name and its parameters in JSON's shape; an
answer or an SqsError is written back in the request's protocol."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from sluice.server.sqs.errors import SqsError

__all__ = ["JSON", "Asked", "error_answer", "from_form", "from_json", "ok_answer"]

JSON = "application/x-amz-json-1.0"
_XMLNS = "http://queue.amazonaws.com/doc/2012-11-05/"
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]
"""Status, headers and body."""


class Asked:
    """An operation asked: its name, parameters and protocol (``json`` or ``query``)."""

    __slots__ = ("operation", "params", "protocol")

    def __init__(self, operation: str, params: dict[str, Any], protocol: str) -> None:
        self.operation = operation
        self.params = params
        self.protocol = protocol


def from_json(target: str, body: bytes) -> Asked:
    service, _, operation = target.partition(".")
    if service != "AmazonSQS" or not operation:
        raise SqsError(
            "UnknownOperationException",
            f"unknown target {target!r}: SQS's are AmazonSQS.<Operation>",
        )
    try:
        params = json.loads(body or b"{}")
    except (ValueError, RecursionError):
        raise SqsError("SerializationException", "the request body is not JSON") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "the request body is not a JSON object")
    return Asked(operation, params, "json")


# Query names of lists and maps -> JSON's (flattened lists are Name.N, maps Name.N.Name/Value).
_LISTS = {
    "AttributeName": "AttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "TagKey": "TagKeys",
    "SendMessageBatchRequestEntry": "Entries",
    "DeleteMessageBatchRequestEntry": "Entries",
    "ChangeMessageVisibilityBatchRequestEntry": "Entries",
}
_MAPS = {
    "Attribute": ("Attributes", "Name", "Value"),
    "MessageAttribute": ("MessageAttributes", "Name", "Value"),
    "MessageSystemAttribute": ("MessageSystemAttributes", "Name", "Value"),
    "Tag": ("Tags", "Key", "Value"),
}


def from_form(body: bytes, query: str, path: str) -> Asked:
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
        pairs += parse_qsl(query, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise SqsError("MalformedQueryString", "the form is not UTF-8 form encoding") from None
    tree: dict[str, Any] = {}
    for key, value in pairs:
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise SqsError("MalformedQueryString", f"parameter {key!r} conflicts")
            node = child
        node[parts[-1]] = value
    operation = tree.pop("Action", None)
    if not isinstance(operation, str) or not operation:
        raise SqsError("MissingAction", "the request has no Action")
    for drop in (
        "Version",
        "AWSAccessKeyId",
        "Signature",
        "SignatureMethod",
        "SignatureVersion",
        "Timestamp",
        "Expires",
    ):
        tree.pop(drop, None)
    params = _shaped(tree)
    if "QueueUrl" not in params and path.strip("/").count("/") == 1:
        params["QueueUrl"] = path
    return Asked(operation, params, "query")


def _shaped(tree: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if key in _MAPS and isinstance(value, dict):
            name, k, v = _MAPS[key]
            out[name] = {
                e.get(k): _shaped(e[v]) if isinstance(e.get(v), dict) else e.get(v)
                for e in _ordered(value)
                if isinstance(e, dict)
            }
        elif key in _LISTS and isinstance(value, dict):
            out[_LISTS[key]] = [_shaped(e) if isinstance(e, dict) else e for e in _ordered(value)]
        elif isinstance(value, dict):
            out[key] = _shaped(value)
        else:
            out[key] = value
    return out


def _ordered(numbered: dict[str, Any]) -> list[Any]:
    if not all(k.isdigit() for k in numbered):
        raise SqsError("MalformedQueryString", "a list's members are numbered from 1")
    return [numbered[k] for k in sorted(numbered, key=int)]


def ok_answer(asked: Asked, result: dict[str, Any]) -> Answer:
    request_id = str(uuid.uuid4())
    if asked.protocol == "json":
        return 200, _headers(JSON, request_id), json.dumps(result).encode()
    op = asked.operation
    inner = _xml(result, op)
    body = (
        f'<?xml version="1.0"?><{op}Response xmlns="{_XMLNS}"><{op}Result>{inner}'
        f"</{op}Result><ResponseMetadata><RequestId>{request_id}</RequestId>"
        f"</ResponseMetadata></{op}Response>"
    )
    return 200, _headers("text/xml", request_id), body.encode()


def error_answer(protocol: str, error: SqsError) -> Answer:
    request_id = str(uuid.uuid4())
    kind = "Sender" if error.sender else "Receiver"
    if protocol == "json":
        headers = _headers(JSON, request_id)
        headers.append((b"x-amzn-query-error", f"{error.code};{kind}".encode()))
        body = {"__type": f"com.amazonaws.sqs#{error.shape}", "message": error.message}
        return error.status, headers, json.dumps(body).encode()
    xml = (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{_XMLNS}"><Error><Type>{kind}</Type>'
        f"<Code>{escape(error.code)}</Code><Message>{escape(error.message)}</Message>"
        f"<Detail/></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return error.status, _headers("text/xml", request_id), xml.encode()


def _headers(content_type: str, request_id: str) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", content_type.encode()), (b"x-amzn-requestid", request_id.encode())]


# JSON's lists and maps -> the query protocol's XML elements.
_ELEMENTS = {
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",
    "Messages": "Message",
    "Failed": "BatchResultErrorEntry",
}
_XML_MAPS = {
    "Attributes": ("Attribute", "Name", "Value"),
    "MessageAttributes": ("MessageAttribute", "Name", "Value"),
    "Tags": ("Tag", "Key", "Value"),
}


def _xml(value: Any, op: str) -> str:
    parts: list[str] = []
    for key, item in value.items():
        if key in _XML_MAPS and isinstance(item, dict):
            tag, k, v = _XML_MAPS[key]
            for name, inner in item.items():
                shown = _xml(inner, op) if isinstance(inner, dict) else escape(str(inner))
                parts.append(f"<{tag}><{k}>{escape(name)}</{k}><{v}>{shown}</{v}></{tag}>")
        elif isinstance(item, list):
            tag = _ELEMENTS.get(key, f"{op}ResultEntry")
            for entry in item:
                inner = _xml(entry, op) if isinstance(entry, dict) else escape(str(entry))
                parts.append(f"<{tag}>{inner}</{tag}>")
        elif isinstance(item, dict):
            parts.append(f"<{key}>{_xml(item, op)}</{key}>")
        else:
            text = ("true" if item else "false") if isinstance(item, bool) else str(item)
            parts.append(f"<{key}>{escape(text)}</{key}>")
    return "".join(parts)
