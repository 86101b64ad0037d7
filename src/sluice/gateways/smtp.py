"""The ``smtp`` transport: an outgoing gateway sends each message, a mail, through an SMTP
server (``smtplib``), one connection kept open between messages.

A message's body is a mail: a JSON object with ``to`` (an address or a list), ``subject``
and ``text``, and optionally ``html``, ``from``, ``cc``, ``bcc``, ``reply_to`` and
``headers`` (an object of further header names and texts); or a whole RFC 5322 message as
text or bytes with the content type ``message/rfc822``. A body that is not a mail is
``refused`` and not tried again (it becomes an error message).

Every mail gets a ``Message-ID`` made from the sluice message's id and enqueue time
(``<S/T/M.microseconds@domain>``, unless an RFC 822 message has one), a ``Date`` of its
enqueue time and an ``X-Sluice-Message-Id``: sent again after a crash, it is the same
mail, and a receiver can tell.

Failures: a server that cannot be reached, or drops the connection, is ``disconnected``;
no answer within ``timeout`` is ``timed out``; a 4xx reply is ``bad response``: all three
are tried again. A 5xx reply (the sender, every recipient or the data refused, a failed
login) and a certificate that does not verify are ``refused``, and are not. When some
recipients are refused and others accepted, the mail is delivered (trying again would
send it twice to the ones that have it): the refused ones are the reply, for the
gateway's ``reply_queue``, and are logged.

Settings: ``host`` (127.0.0.1), ``port`` (25), ``timeout`` (seconds, 30), ``starttls``
(false), ``username`` and ``password`` (AUTH, only with ``starttls`` unless
``auth_without_tls`` is true), ``sender`` (the From of mails that name none, and the
envelope sender), ``message_id_domain`` (default: the domain of the mail's From),
``local_hostname`` (the EHLO name); and the gateways' own ``attempts``, ``backoff``,
``max_backoff``, ``reply_queue`` and ``profile`` (docs/gateways.md).
"""

from __future__ import annotations

import email.policy
import email.utils
import logging
import smtplib
import socket
import ssl
import time
from collections.abc import Mapping
from email.headerregistry import AddressHeader, BaseHeader, HeaderRegistry
from email.message import EmailMessage
from email.parser import BytesParser
from typing import TYPE_CHECKING, Any, Final, NoReturn

from sluice.errors import ConfigurationError, DeliveryFailed
from sluice.gateways.model import Gateway
from sluice.gateways.transports import Delivered, Transport
from sluice.message import Message, is_json

if TYPE_CHECKING:
    from sluice.engine.database import Engine

__all__ = ["DEFAULT_PORT", "DEFAULT_TIMEOUT", "RFC822", "TRANSPORT", "SmtpOut", "mail_of"]

log = logging.getLogger("sluice.gateways.smtp")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 25
DEFAULT_TIMEOUT = 30.0
RFC822: Final = "message/rfc822"
IDLE = 10.0
"""Seconds a kept connection may idle before it is checked (NOOP) ahead of a mail."""

SETTINGS: Final = frozenset(
    {"host", "port", "timeout", "starttls", "username", "password", "auth_without_tls",
     "sender", "message_id_domain", "local_hostname",
     "attempts", "backoff", "max_backoff", "reply_queue", "profile"}
)  # fmt: skip
_FIELDS: Final = frozenset(
    {"to", "subject", "text", "html", "from", "cc", "bcc", "reply_to", "headers"}
)
_OWN_HEADERS: Final = frozenset(
    {"to", "from", "cc", "bcc", "reply-to", "subject", "message-id", "date", "sender",
     "mime-version", "content-type", "content-transfer-encoding", "x-sluice-message-id"}
)  # fmt: skip


class _Headers(HeaderRegistry):
    """The standard header registry, each header's class made once.

    The standard one builds a new class (``type(...)``) for every header it parses or
    fetches, 14 a mail, and each mail cost more as they piled up (built and serialised:
    0.70 ms at first, 0.91 ms after 3,000 mails; 0.50 ms with the classes kept). The
    classes are the same each time, so they are kept, one per header name.
    """

    def __init__(self) -> None:
        super().__init__()
        self._classes: dict[str, type[BaseHeader]] = {}

    def __getitem__(self, name: str) -> type[BaseHeader]:
        key = name.lower()
        made = self._classes.get(key)
        if made is None:  # two threads may both make it: either class serves
            made = self._classes[key] = super().__getitem__(name)
        return made


_POLICY = email.policy.default.clone(header_factory=_Headers())


# --- settings ---------------------------------------------------------------------------
def _flag(gateway: Gateway, name: str) -> bool:
    value = gateway.settings.get(name, False)
    if not isinstance(value, bool):
        raise ConfigurationError(
            f"gateway {gateway.queue!r}: {name} is true or false, not {value!r}"
        )
    return value


def _plain(gateway: Gateway, name: str, default: str | None = None) -> str | None:
    value = gateway.text(name, default)
    if value is not None and (not value or any(c in value for c in "\r\n\0 \t")):
        raise ConfigurationError(f"gateway {gateway.queue!r}: {name} {value!r} cannot be used")
    return value


def check(gateway: Gateway) -> None:
    """ConfigurationError for settings an smtp gateway cannot work with."""
    queue = gateway.queue
    unknown = sorted(set(gateway.settings) - SETTINGS)
    if unknown:
        raise ConfigurationError(
            f"gateway {queue!r}: the smtp transport has no setting {', '.join(unknown)}; "
            f"it takes {', '.join(sorted(SETTINGS))}"
        )
    _plain(gateway, "host", DEFAULT_HOST)
    port = gateway.number("port", DEFAULT_PORT, minimum=1)
    if port != int(port) or port > 65535:
        raise ConfigurationError(f"gateway {queue!r}: port is 1 to 65535, not {port!r}")
    gateway.number("timeout", DEFAULT_TIMEOUT, minimum=0.001)
    starttls = _flag(gateway, "starttls")
    plain_auth = _flag(gateway, "auth_without_tls")
    username, password = gateway.text("username"), gateway.text("password")
    if (username is None) != (password is None):
        raise ConfigurationError(f"gateway {queue!r}: give both username and password, or neither")
    if username is not None and not (starttls or plain_auth):
        raise ConfigurationError(
            f"gateway {queue!r}: a password is sent only over STARTTLS; set starttls=True "
            "(or auth_without_tls=True for a server on a network you trust)"
        )
    _plain(gateway, "local_hostname")
    _plain(gateway, "message_id_domain")
    sender = gateway.text("sender")
    if sender is not None:
        try:
            _addresses("sender", sender)
        except DeliveryFailed as exc:
            raise ConfigurationError(f"gateway {queue!r}: {exc.detail}") from None


# --- mails --------------------------------------------------------------------------
def _refuse(detail: str) -> NoReturn:
    raise DeliveryFailed("refused", f"not a mail: {detail}", retry=False)


def _addresses(field: str, value: object) -> list[str]:
    """The addresses ``value`` (a text or a list of texts) gives, as header texts."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(a, str) for a in items):
        _refuse(f"{field} is an address or a list of addresses, not {value!r}")
    found: list[str] = []
    for item in items:
        if any(c in item for c in "\r\n\0"):
            _refuse(f"{field} {item!r} holds a line break")
        header = _POLICY.header_factory("To", item)  # parsed as an address list
        parsed = getattr(header, "addresses", ())
        if (header.defects or not parsed
                or not all(a.username and a.domain for a in parsed)):  # fmt: skip
            _refuse(f"{field} {item!r} is not an address")
        found.append(item)
    return found


def _text(body: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        _refuse(f"{name} is a text, not {value!r}")
    return value


def _from_json(body: Mapping[str, Any]) -> EmailMessage:
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        _refuse(
            f"no field {', '.join(map(repr, unknown))} (a mail has {', '.join(sorted(_FIELDS))})"
        )
    mail = EmailMessage(policy=_POLICY)
    if "to" not in body:
        _refuse("it has no 'to'")
    for field, header in (("to", "To"), ("cc", "Cc"), ("bcc", "Bcc"), ("reply_to", "Reply-To"),
                          ("from", "From")):  # fmt: skip
        if body.get(field) is not None:
            mail[header] = ", ".join(_addresses(field, body[field]))
    subject = _text(body, "subject", required=True)
    if subject is not None and any(c in subject for c in "\r\n\0"):
        _refuse("the subject holds a line break")
    mail["Subject"] = subject
    headers = body.get("headers") or {}
    if not isinstance(headers, dict):
        _refuse(f"headers is an object of header names and texts, not {headers!r}")
    for name, value in headers.items():
        if (not name or not name.isascii() or not all(33 <= ord(c) <= 126 for c in name)
                or ":" in name):  # fmt: skip
            _refuse(f"{name!r} is not a header name")
        if name.lower() in _OWN_HEADERS:
            _refuse(f"header {name!r} is set from the mail's fields, not from headers")
        if not isinstance(value, str) or any(c in value for c in "\r\n\0"):
            _refuse(f"header {name!r} is a text on one line, not {value!r}")
        mail[name] = value
    text = _text(body, "text", required=True)
    assert text is not None
    mail.set_content(text)
    html = _text(body, "html")
    if html is not None:
        mail.add_alternative(html, subtype="html")
    return mail


def _from_rfc822(body: object) -> EmailMessage:
    if isinstance(body, str):
        try:
            body = body.encode("utf-8")
        except UnicodeEncodeError:
            _refuse("its text cannot be encoded")
    if not isinstance(body, bytes) or not body.strip():
        _refuse(f"a {RFC822} message is text or bytes, not {type(body).__name__}")
    mail = BytesParser(policy=_POLICY).parsebytes(body)
    assert isinstance(mail, EmailMessage)
    if not any(key.lower() in ("to", "cc", "bcc") for key in mail):
        _refuse("it names no recipient (To, Cc or Bcc)")
    for key in ("To", "Cc", "Bcc", "From"):
        for value in mail.get_all(key, []):
            _addresses(key, str(value))
    return mail


def mail_of(message: Message, sender: str | None, domain: str | None = None) -> EmailMessage:
    """The mail ``message`` holds, with its Message-ID, Date and From set; DeliveryFailed
    (refused, no retry) if it holds none."""
    kind = message.content_type.split(";")[0].strip().lower()
    if kind == RFC822:
        mail = _from_rfc822(message.body)
    elif is_json(message.content_type) and isinstance(message.body, dict):
        mail = _from_json(message.body)
    else:
        _refuse(f"a mail is a JSON object or {RFC822}, not {kind} {type(message.body).__name__}")
    if mail["From"] is None:
        if sender is None:
            _refuse("it has no 'from', and the gateway no sender")
        mail["From"] = sender
    if mail["Message-ID"] is None:
        mail["Message-ID"] = message_id(message, domain or _domain(str(mail["From"])))
    if mail["Date"] is None:
        mail["Date"] = email.utils.formatdate(message.enqueued, usegmt=True)
    del mail["X-Sluice-Message-Id"]
    mail["X-Sluice-Message-Id"] = message.id
    return mail


def message_id(message: Message, domain: str) -> str:
    """``<id.microseconds@domain>``: the same for every send of ``message``."""
    return f"<{message.id}.{round(message.enqueued * 1_000_000)}@{domain}>"


def _domain(address: str) -> str:
    header = _POLICY.header_factory("From", address)
    assert isinstance(header, AddressHeader)
    return header.addresses[0].domain or "sluice.invalid"


# --- sending ------------------------------------------------------------------------
def _code_failure(what: str, code: int, text: bytes | str) -> DeliveryFailed:
    said = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    detail = f"{what}: {code} {said}".strip()
    if 400 <= code < 500:
        return DeliveryFailed("bad response", detail)
    if 500 <= code < 600:
        return DeliveryFailed("refused", detail, retry=False)
    return DeliveryFailed("bad response", f"{detail} (an unexpected reply)")


class SmtpOut:
    """Sends the mails of one outgoing gateway over one kept SMTP connection."""

    def __init__(self, db: Engine, gateway: Gateway) -> None:
        self._gateway = gateway
        self._host = gateway.text("host", DEFAULT_HOST) or DEFAULT_HOST
        self._port = int(gateway.number("port", DEFAULT_PORT, minimum=1))
        self._timeout = gateway.number("timeout", DEFAULT_TIMEOUT, minimum=0.001)
        self._starttls = _flag(gateway, "starttls")
        self._username = gateway.text("username")
        self._password = gateway.text("password")
        self._sender = gateway.text("sender")
        self._domain = gateway.text("message_id_domain")
        self._local_hostname = gateway.text("local_hostname")
        self._smtp: smtplib.SMTP | None = None
        self._used = 0.0

    @property
    def _where(self) -> str:
        return f"SMTP {self._host}:{self._port}"

    def deliver(self, message: Message) -> Delivered | None:
        mail = mail_of(message, self._sender, self._domain)
        smtp = self._connection()
        try:
            refused = smtp.send_message(mail)
        except BaseException as exc:
            self._drop()
            self._fail(exc)
        self._used = time.monotonic()
        if not refused:
            return None
        log.warning("%s: mail %s not sent to %s", self._where, message.id, refused)
        answer = {to: f"{code} {text.decode('utf-8', 'replace')}"
                  for to, (code, text) in refused.items()}  # fmt: skip
        return Delivered({"refused": answer}, "application/json", {"refused": len(answer)})

    def _connection(self) -> smtplib.SMTP:
        smtp = self._smtp
        if smtp is not None and time.monotonic() - self._used > IDLE:
            try:  # a connection idle for a while may have been closed by the server
                code, _ = smtp.noop()
                if code != 250:
                    self._drop()
            except (smtplib.SMTPException, OSError):
                self._drop()
        if self._smtp is None:
            smtp = smtplib.SMTP(timeout=self._timeout, local_hostname=self._local_hostname)
            try:
                smtp.connect(self._host, self._port)
                smtp.ehlo_or_helo_if_needed()
                if self._starttls:
                    smtp.starttls(context=ssl.create_default_context())
                    smtp.ehlo()
                if self._username is not None and self._password is not None:
                    smtp.login(self._username, self._password)
            except BaseException as exc:
                _close(smtp)
                self._fail(exc)
            self._smtp = smtp
        self._used = time.monotonic()
        assert self._smtp is not None
        return self._smtp

    def _fail(self, exc: BaseException) -> NoReturn:
        """Raise the DeliveryFailed that ``exc`` means (anything else as it is)."""
        where = self._where
        if isinstance(exc, DeliveryFailed):
            raise exc
        if isinstance(exc, smtplib.SMTPRecipientsRefused):
            codes = [code for code, _ in exc.recipients.values()]
            said = "; ".join(f"{to}: {code} {text.decode('utf-8', 'replace')}"
                             for to, (code, text) in exc.recipients.items())  # fmt: skip
            if codes and all(400 <= c < 500 for c in codes):
                raise DeliveryFailed("bad response", f"{where}: recipients: {said}") from None
            raise DeliveryFailed("refused", f"{where}: recipients refused: {said}",
                                 retry=False) from None  # fmt: skip
        if isinstance(exc, smtplib.SMTPSenderRefused):
            raise _code_failure(f"{where}: sender {exc.sender}", exc.smtp_code,
                                exc.smtp_error) from None  # fmt: skip
        if isinstance(exc, smtplib.SMTPResponseException):  # data, helo, auth, connect
            if exc.smtp_code == -1:  # smtplib's own: the server closed or said nothing
                raise DeliveryFailed("disconnected", f"{where}: {exc.smtp_error!r}") from None
            raise _code_failure(where, exc.smtp_code, exc.smtp_error) from None
        if isinstance(exc, smtplib.SMTPNotSupportedError):
            raise DeliveryFailed("refused", f"{where}: {exc}", retry=False) from None
        if isinstance(exc, smtplib.SMTPServerDisconnected):
            raise DeliveryFailed("disconnected", f"{where}: {exc}") from None
        if isinstance(exc, smtplib.SMTPException):
            raise DeliveryFailed("bad response", f"{where}: {exc!r}") from None
        if isinstance(exc, ssl.SSLCertVerificationError):
            raise DeliveryFailed("refused", f"{where}: {exc}", retry=False) from None
        if isinstance(exc, TimeoutError | socket.timeout):
            raise DeliveryFailed(
                "timed out", f"{where}: no answer in {self._timeout:g} s"
            ) from None
        if isinstance(exc, OSError):  # refused, unreachable, reset, DNS, TLS
            raise DeliveryFailed("disconnected", f"{where}: {exc!r}") from None
        raise exc

    def _drop(self) -> None:
        smtp, self._smtp = self._smtp, None
        if smtp is not None:
            _close(smtp, quit=False)

    def close(self) -> None:
        smtp, self._smtp = self._smtp, None
        if smtp is not None:
            _close(smtp)


def _close(smtp: smtplib.SMTP, *, quit: bool = True) -> None:
    try:
        if quit and smtp.sock is not None:
            smtp.quit()
    except (smtplib.SMTPException, OSError):
        pass
    finally:
        smtp.close()


TRANSPORT = Transport("smtp", ("out",), check, outbound=SmtpOut)
