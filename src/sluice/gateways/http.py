"""The ``http`` transport: an outgoing gateway POSTs each message to a URL; an incoming one
is an endpoint of ``sluice serve`` (``POST /api/gateways/{queue}``, server/gateways.py).

Out, per message: the body as stored (JSON, text, XML or bytes) with its content type;
``Idempotency-Key`` and ``Sluice-Message-Id`` the message's id, so a receiver that
deduplicates (sluice serve does) stores a retried delivery once; ``Sluice-Properties``
the properties as a JSON object; ``Sluice-Priority``, and ``Sluice-Correlation-Id``,
``Sluice-Reply-To``, ``Sluice-Group`` and ``Sluice-Type`` where set. A 2xx answer
delivers it; with a ``reply_queue`` the answer's body goes there, correlated to the
message. Connection failures are ``disconnected``, no answer within ``timeout`` is
``timed out``, 5xx, 408, 409, 425 and 429 are ``bad response``: all three are tried
again. Other 4xx answers are ``refused`` and are not.

Settings: ``url`` (http or https), or a message property named by ``url_property``
(default ``url``) that overrides it per message; ``timeout`` (seconds, default 10);
``attempts`` and ``backoff`` (gateways' own); ``reply_queue``; ``header_<name>`` adds a
fixed request header (an API key for the receiver, say).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from sluice.errors import ConfigurationError, DeliveryFailed
from sluice.gateways.model import Gateway
from sluice.gateways.transports import Delivered, Transport
from sluice.message import Message, decode_json, encode_json, is_json, is_xml

if TYPE_CHECKING:
    import httpx

    from sluice.engine.database import Engine

__all__ = ["DEFAULT_TIMEOUT", "TRANSPORT", "HttpOut"]

DEFAULT_TIMEOUT = 10.0
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
    """POSTs messages for one outgoing gateway (an httpx client of its own)."""

    def __init__(self, db: Engine, gateway: Gateway) -> None:
        import httpx  # noqa: PLC0415  (an extra)

        self._gateway = gateway
        self._url = gateway.text("url")
        self._url_property = gateway.text("url_property", "url")
        headers = {name[7:]: str(value) for name, value in gateway.settings.items()
                   if name.startswith("header_")}  # fmt: skip
        timeout = gateway.number("timeout", DEFAULT_TIMEOUT, minimum=0.001)
        self._client = httpx.Client(timeout=timeout, headers=headers, follow_redirects=False)
        self._httpx = httpx

    def deliver(self, message: Message) -> Delivered | None:
        url = self._url
        chosen = message.properties.get(self._url_property or "")
        if isinstance(chosen, str):
            try:
                url = _check_url(self._gateway.queue, chosen)
            except ConfigurationError as exc:
                raise DeliveryFailed("refused", str(exc), retry=False) from None
        if url is None:
            raise DeliveryFailed("refused", "the message names no url", retry=False)
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
        answer = self._post(url, body, headers)
        return reply_of(answer)

    def _post(self, url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
        httpx = self._httpx
        try:
            answer = self._client.post(url, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise DeliveryFailed("timed out", f"POST {url}: no answer in time ({exc})") from None
        except (httpx.RemoteProtocolError, httpx.DecodingError) as exc:  # not HTTP back
            raise DeliveryFailed("bad response", f"POST {url}: {exc!r}") from None
        except httpx.HTTPError as exc:  # connection refused, reset, DNS, protocol errors
            raise DeliveryFailed("disconnected", f"POST {url}: {exc!r}") from None
        status = answer.status_code
        if status >= 500 or status in _AGAIN:
            raise DeliveryFailed("bad response", f"POST {url}: HTTP {status}")
        if status >= 300:
            text = answer.text[:_ANSWER_LIMIT]
            raise DeliveryFailed("refused", f"POST {url}: HTTP {status}: {text}", retry=False)
        return answer

    def close(self) -> None:
        self._client.close()


def wire(message: Message) -> tuple[bytes, str]:
    """A message's body as bytes on the wire, and its content type."""
    body = message.body
    if isinstance(body, bytes):
        return body, message.content_type
    if isinstance(body, str) and not is_json(message.content_type):
        return body.encode("utf-8"), message.content_type
    return encode_json(body).encode("utf-8"), message.content_type


def reply_of(answer: httpx.Response) -> Delivered:
    """An answer as a message body: JSON decoded, text and XML as text, the rest bytes."""
    kind = answer.headers.get("content-type", "application/octet-stream")
    props: dict[str, str | int | float | bool] = {"status": answer.status_code}
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
            return Delivered(answer.content.decode(answer.encoding or "utf-8"), kind, props)
        except (UnicodeDecodeError, LookupError):
            raise DeliveryFailed("bad response", f"the answer is not {kind} text",
                                 retry=False) from None  # fmt: skip
    return Delivered(answer.content, kind, props)


TRANSPORT = Transport("http", ("in", "out"), check, outbound=HttpOut)
