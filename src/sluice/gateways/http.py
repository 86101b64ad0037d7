"""The ``http`` transport: an outgoing gateway POSTs each message to a URL; an incoming one
is an endpoint of ``sluice serve`` (``POST /api/gateways/{queue}``, server/gateways.py).

Out, per message: the body as stored (JSON, text, XML or bytes) with its content type;
``Idempotency-Key`` and ``Sluice-Message-Id`` the message's id, so a receiver that
deduplicates (sluice serve does) stores a retried delivery once; ``Sluice-Properties``
the properties as a JSON object; ``Sluice-Priority``, and ``Sluice-Correlation-Id``,
``Sluice-Reply-To``, ``Sluice-Group`` and ``Sluice-Type`` where set, and W3C
``traceparent`` and ``tracestate`` where the properties carry them (the producer's trace
context: docs/observability.md). A 2xx answer
delivers it; with a ``reply_queue`` the answer's body goes there, correlated to the
message. Connection failures are ``disconnected``, no answer within ``timeout`` is
``timed out``, 5xx, 408, 409, 425 and 429 are ``bad response``: all three are tried
again. Other 4xx answers are ``refused`` and are not.

Settings: ``url`` (http or https), or a message property named by ``url_property``
(default ``url``) that overrides it per message; ``timeout`` (seconds, default 10);
``attempts`` and ``backoff`` (gateways' own); ``reply_queue``; ``header_<name>`` adds a
fixed request header (an API key for the receiver, say); ``batch`` (default 1).

``batch`` above 1 is for a receiver that is another sluice's incoming http gateway (node
to node forwarding): up to that many consecutive messages for the same URL go in one
request to the URL's ``/batch`` (``POST /api/gateways/{queue}/batch``, server/gateways.py),
each entry with what its own post would send (its id as its key, its body, content type
and options), so each is stored once per key and in order, whether it is sent alone or
in a batch, once or again. The answer says, per message, what its own post would have
answered; the first that was not stored stops the batch (the ones after it are sent
again). A batch refused as a whole is sent again as its first message alone, so a
refusal lands on the message it is about.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from sluice.engine.observe import TRACE_PROPERTIES
from sluice.errors import ConfigurationError, DeliveryFailed
from sluice.gateways.client import Answer, HttpClient
from sluice.gateways.model import Gateway
from sluice.gateways.transports import Delivered, Transport
from sluice.message import Message, decode_json, encode_json, is_json, is_xml

if TYPE_CHECKING:
    from sluice.engine.database import Engine

__all__ = ["DEFAULT_TIMEOUT", "MAX_BATCH", "TRANSPORT", "HttpOut"]

DEFAULT_TIMEOUT = 10.0
MAX_BATCH = 1000
"""The most messages one batch request carries (the receiver's limit)."""
_ANSWER_LIMIT = 200  # characters of a refusal's body kept in the error message
_AGAIN = frozenset({408, 409, 425, 429})
"""4xx answers that may pass: a timeout, a conflict (sluice serve's 409 while a post with
the same Idempotency-Key still runs, or ran in a server that died), too early, too many."""


def check(gateway: Gateway) -> None:
    url = gateway.text("url")
    if url is not None:
        _check_url(gateway.queue, url)
    elif gateway.direction == "out" and gateway.text("url_property", "url") is None:
        raise ConfigurationError(f"gateway {gateway.queue!r}: http out needs a url")
    gateway.number("timeout", DEFAULT_TIMEOUT, minimum=0.001)
    batch = gateway.number("batch", 1, minimum=1)
    if batch != int(batch) or batch > MAX_BATCH:
        raise ConfigurationError(
            f"gateway {gateway.queue!r}: batch is a whole number from 1 to {MAX_BATCH}"
        )
    for name in gateway.settings:
        if name.startswith("header_"):
            value = gateway.text(name)
            if not name[7:] or any(c in f"{name}{value}" for c in "\r\n\0"):
                raise ConfigurationError(f"gateway {gateway.queue!r}: bad header setting {name!r}")


def _check_url(queue: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(f"gateway {queue!r}: {url!r} is not an http or https URL")
    return url


class HttpOut:
    """POSTs messages for one outgoing gateway (an HTTP client of its own, client.py)."""

    def __init__(self, db: Engine, gateway: Gateway) -> None:
        self._gateway = gateway
        self._url = gateway.text("url")
        self._url_property = gateway.text("url_property", "url")
        headers = {name[7:]: str(value) for name, value in gateway.settings.items()
                   if name.startswith("header_")}  # fmt: skip
        timeout = gateway.number("timeout", DEFAULT_TIMEOUT, minimum=0.001)
        self._client = HttpClient(timeout=timeout, headers=headers)

    def _url_of(self, message: Message) -> str:
        url = self._url
        chosen = message.properties.get(self._url_property or "")
        if isinstance(chosen, str):
            try:
                url = _check_url(self._gateway.queue, chosen)
            except ConfigurationError as exc:
                raise DeliveryFailed("refused", str(exc), retry=False) from None
        if url is None:
            raise DeliveryFailed("refused", "the message names no url", retry=False)
        return url

    def deliver(self, message: Message) -> Delivered | None:
        url = self._url_of(message)
        body, kind = wire(message)
        headers = {"content-type": kind, "idempotency-key": message.id,
                   "sluice-message-id": message.id,
                   "sluice-properties": json.dumps(message.properties)}  # fmt: skip
        if message.correlation_id is not None:
            headers["sluice-correlation-id"] = message.correlation_id
        if message.reply_to is not None:
            headers["sluice-reply-to"] = message.reply_to
        if message.group is not None:
            headers["sluice-group"] = message.group
        if message.type is not None:
            headers["sluice-type"] = message.type
        headers["sluice-priority"] = str(message.priority)
        for name in TRACE_PROPERTIES:  # the producer's trace context, for any receiver
            value = message.properties.get(name)
            if isinstance(value, str):
                headers[name] = value
        answer = self._post(url, body, headers)
        return reply_of(answer)

    def deliver_many(
        self, messages: Sequence[Message]
    ) -> tuple[list[Delivered | None], DeliveryFailed | None]:
        """Deliver ``messages`` in order, as many as one batch request can (those for
        the first one's URL): the replies of the delivered ones (the first few), and
        why the next one was not, if it was not."""
        try:
            url = self._url_of(messages[0])
        except DeliveryFailed as exc:
            return [], exc
        same = [messages[0]]
        for message in messages[1:]:
            try:
                if self._url_of(message) != url:
                    break
            except DeliveryFailed:  # its own refusal, when it comes first
                break
            same.append(message)
        if len(same) == 1:
            try:
                return [self.deliver(same[0])], None
            except DeliveryFailed as exc:
                return [], exc
        body = json.dumps({"messages": [_entry(m) for m in same]}).encode()
        try:
            answer = self._post(_batch_url(url), body, {"content-type": "application/json"})
        except DeliveryFailed as exc:
            if exc.retry:
                return [], exc
            return self.deliver_many(same[:1])  # refused as a whole: whose is it?
        return self._results(url, same, answer)

    def _results(
        self, url: str, sent: Sequence[Message], answer: Answer
    ) -> tuple[list[Delivered | None], DeliveryFailed | None]:
        try:
            results = answer.json()["results"]
            if not isinstance(results, list) or not 1 <= len(results) <= len(sent):
                raise TypeError(results)
            outcomes = [(int(r["status"]), r["answer"]) for r in results]
        except (ValueError, TypeError, KeyError, IndexError):
            raise DeliveryFailed("bad response", f"POST {_batch_url(url)}: not a batch's "
                                 "answer", retry=False) from None  # fmt: skip
        replies: list[Delivered | None] = []
        for status, value in outcomes:
            failure = _failure(url, status, json.dumps(value))
            if failure is not None:
                return replies, failure
            replies.append(Delivered(value, "application/json", {"status": status}))
        return replies, None

    def _post(self, url: str, body: bytes, headers: dict[str, str]) -> Answer:
        answer = self._client.post(url, body, headers)
        failure = _failure(url, answer.status, answer.text)
        if failure is not None:
            raise failure
        return answer

    def close(self) -> None:
        self._client.close()


def _failure(url: str, status: int, text: str) -> DeliveryFailed | None:
    """What an answer with ``status`` means for the message: None if it was delivered."""
    if status >= 500 or status in _AGAIN:
        return DeliveryFailed("bad response", f"POST {url}: HTTP {status}")
    if status >= 300:
        return DeliveryFailed("refused", f"POST {url}: HTTP {status}: {text[:_ANSWER_LIMIT]}",
                              retry=False)  # fmt: skip
    return None


def _batch_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/batch"))


def _entry(message: Message) -> dict[str, Any]:
    """A message as an entry of a batch: what its own post would send."""
    body, kind = wire(message)
    entry: dict[str, Any] = {"key": message.id, "body": base64.b64encode(body).decode("ascii"),
                             "content_type": kind, "properties": message.properties,
                             "priority": message.priority}  # fmt: skip
    for option in ("correlation_id", "reply_to", "group", "type"):
        value = getattr(message, option)
        if value is not None:
            entry[option] = value
    return entry


def wire(message: Message) -> tuple[bytes, str]:
    """A message's body as bytes on the wire, and its content type."""
    body = message.body
    if isinstance(body, bytes):
        return body, message.content_type
    if isinstance(body, str) and not is_json(message.content_type):
        return body.encode("utf-8"), message.content_type
    return encode_json(body).encode("utf-8"), message.content_type


def reply_of(answer: Answer) -> Delivered:
    """An answer as a message body: JSON decoded, text and XML as text, the rest bytes."""
    kind = answer.content_type or "application/octet-stream"
    props: dict[str, str | int | float | bool] = {"status": answer.status}
    if not answer.content:
        return Delivered(b"", "application/octet-stream", props)
    if is_json(kind):
        try:
            value = decode_json(answer.content)
        except ValueError:
            raise DeliveryFailed("bad response", "the answer is not the JSON it says",
                                 retry=False) from None  # fmt: skip
        return Delivered(value, "application/json", props)
    if kind.startswith("text/") or is_xml(kind):
        try:
            return Delivered(answer.content.decode(answer.charset or "utf-8"), kind, props)
        except (UnicodeDecodeError, LookupError):
            raise DeliveryFailed("bad response", f"the answer is not {kind} text",
                                 retry=False) from None  # fmt: skip
    return Delivered(answer.content, kind, props)


TRANSPORT = Transport("http", ("in", "out"), check, outbound=HttpOut)
