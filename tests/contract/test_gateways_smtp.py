"""Outgoing smtp gateways (sluice.gateways.smtp) on every backend, against a real SMTP
server on loopback (aiosmtpd): JSON and RFC 822 mails delivered with a Message-ID made
from the message's id, bodies that are not mails refused, 4xx replies tried again, 5xx
replies and refused recipients not, nobody listening disconnected, one connection kept,
AUTH, the time-of-week profile holding sends back until the clock moves on, and
definitions that cannot work refused when they are made."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice import ManualClock
from sluice.errors import ConfigurationError, DeliveryFailed
from sluice.gateways.throttle import window_key
from sluice.jobs.profiles import Entry, Profile

pytest.importorskip("aiosmtpd")

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Sink:
    """An SMTP server's handler: answers DATA in turn (the last answer repeats), refuses
    the recipients in ``refuse``, and keeps what it accepted."""

    data_answers: list[str] = field(default_factory=lambda: ["250 OK"])
    refuse: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    data_calls: int = 0
    greetings: int = 0
    got: list[tuple[str, list[str], EmailMessage]] = field(default_factory=list)

    async def handle_EHLO(  # noqa: N802
        self, server: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        self.greetings += 1
        session.host_name = hostname
        return responses

    async def handle_RCPT(  # noqa: N802
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        if address in self.refuse:
            return self.refuse[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        self.data_calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        answer = self.data_answers[min(self.data_calls, len(self.data_answers)) - 1]
        if answer.startswith("250"):
            mail = BytesParser(policy=default_policy).parsebytes(envelope.content)
            assert isinstance(mail, EmailMessage)
            self.got.append((envelope.mail_from, list(envelope.rcpt_tos), mail))
        return answer


def _accounts(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
    ok = isinstance(data, LoginPassword) and (data.login, data.password) == (b"ann", b"s3cret")
    return AuthResult(success=ok, handled=False)


@pytest.fixture
def sink() -> Iterator[tuple[Sink, int]]:
    handler = Sink()
    controller = Controller(handler, hostname="127.0.0.1", port=_free_port(),
                            authenticator=_accounts, auth_require_tls=False)  # fmt: skip
    controller.start()
    try:
        yield handler, controller.port
    finally:
        controller.stop()


def _gateway(db: sluice.Database, port: int, **settings: Any) -> None:
    db.create_queue("mail.errors")
    db.create_queue("mail", error_queue="mail.errors")
    given: dict[str, Any] = {"sender": "News <news@example.org>", "backoff": 0, "timeout": 5}
    db.gateways.define("mail", direction="out", transport="smtp", port=port, **(given | settings))


def _failed(db: sluice.Database) -> list[str]:
    return [str(m.error) for m in db.queue("mail.errors").browse()]


def test_a_json_mail_is_sent_with_its_headers_and_message_id(
    db: sluice.Database, sink: tuple[Sink, int]
) -> None:
    s, port = sink
    _gateway(db, port)
    mid = db.queue("mail").put({
        "to": ["ann@example.org", "Bob Example <bob@example.org>"], "cc": "carl@example.org",
        "bcc": ["dora@example.org"], "reply_to": "help@example.org", "subject": "Hello, Ann ü",
        "text": "Dear Ann,\nyour report.\n", "html": "<p>Dear Ann</p>",
        "headers": {"X-Campaign": "spring", "List-Unsubscribe": "<mailto:off@example.org>"},
    })  # fmt: skip
    assert db.gateways.run_until_idle() == 1
    ((sender, recipients, mail),) = s.got
    assert sender == "news@example.org"
    assert sorted(recipients) == ["ann@example.org", "bob@example.org", "carl@example.org",
                                  "dora@example.org"]  # fmt: skip
    assert mail["From"] == "News <news@example.org>"
    assert mail["To"] == "ann@example.org, Bob Example <bob@example.org>"
    assert mail["Cc"] == "carl@example.org"
    assert mail["Bcc"] is None  # on the envelope only
    assert mail["Reply-To"] == "help@example.org"
    assert mail["Subject"] == "Hello, Ann ü"
    assert mail["X-Campaign"] == "spring"
    assert mail["X-Sluice-Message-Id"] == mid
    assert mail["Message-ID"].startswith(f"<{mid}.")
    assert mail["Message-ID"].endswith("@example.org>")
    assert mail["Date"] is not None
    text = mail.get_body(("plain",))
    html = mail.get_body(("html",))
    assert text is not None
    assert html is not None
    assert isinstance(text, EmailMessage)
    assert isinstance(html, EmailMessage)
    assert text.get_content().replace("\r\n", "\n") == "Dear Ann,\nyour report.\n"
    assert "<p>Dear Ann</p>" in html.get_content()
    assert db.queue("mail").stats()["ready"] == 0
    assert _failed(db) == []


def test_an_rfc822_mail_is_sent_as_it_is(db: sluice.Database, sink: tuple[Sink, int]) -> None:
    s, port = sink
    _gateway(db, port, message_id_domain="mx.example.net")
    raw = (
        b"From: Ann <ann@example.org>\r\nTo: bob@example.org\r\nCc: carl@example.org\r\n"
        b"Subject: minutes\r\nMessage-ID: <minutes-7@example.org>\r\n\r\nAll agreed.\r\n"
    )
    db.queue("mail").put(raw, content_type="message/rfc822")
    mid = db.queue("mail").put("To: dora@example.org\nSubject: no id\n\nHi\n",
                               content_type="message/rfc822")  # fmt: skip
    assert db.gateways.run_until_idle() == 2
    (first_from, first_to, first), (second_from, second_to, second) = s.got
    assert (first_from, sorted(first_to)) == (
        "ann@example.org",
        ["bob@example.org", "carl@example.org"],
    )
    assert first["Message-ID"] == "<minutes-7@example.org>"  # the producer's own is kept
    assert first["Subject"] == "minutes"
    assert first.get_content() == "All agreed.\r\n"
    # No From: the gateway's sender; no Message-ID: one from the sluice message's id.
    assert (second_from, second_to) == ("news@example.org", ["dora@example.org"])
    assert second["From"] == "News <news@example.org>"
    assert second["Message-ID"].startswith(f"<{mid}.")
    assert second["Message-ID"].endswith("@mx.example.net>")


@pytest.mark.parametrize(
    ("body", "content_type", "said"),
    [
        ("hello", "text/plain", "not text/plain"),
        (["ann@example.org"], "application/json", "JSON object"),
        ({"subject": "s", "text": "t"}, "application/json", "no 'to'"),
        ({"to": "not an address", "subject": "s", "text": "t"}, "application/json", "address"),
        ({"to": [], "subject": "s", "text": "t"}, "application/json", "list of addresses"),
        ({"to": "a@example.org", "text": "t"}, "application/json", "subject is a text"),
        ({"to": "a@example.org", "subject": "s"}, "application/json", "text is a text"),
        (
            {"to": "a@example.org", "subject": "s", "text": "t", "body": "x"},
            "application/json",
            "no field 'body'",
        ),
        (
            {"to": "a@example.org", "subject": "s\r\nBcc: all@example.org", "text": "t"},
            "application/json",
            "line break",
        ),
        (
            {"to": "a@example.org", "subject": "s", "text": "t", "headers": {"X-A": "1\nB: 2"}},
            "application/json",
            "one line",
        ),
        (
            {"to": "a@example.org", "subject": "s", "text": "t", "headers": {"To": "b@x.org"}},
            "application/json",
            "set from the mail's fields",
        ),
        ("Subject: nobody\n\nHi\n", "message/rfc822", "no recipient"),
        (b"", "message/rfc822", "text or bytes"),
    ],
)
def test_a_body_that_is_not_a_mail_is_refused_and_not_tried_again(
    db: sluice.Database, sink: tuple[Sink, int], body: Any, content_type: str, said: str
) -> None:
    s, port = sink
    _gateway(db, port, attempts=3)
    db.queue("mail").put(body, content_type=content_type)
    assert db.gateways.run_until_idle() == 1
    (error,) = _failed(db)
    assert "refused" in error
    assert "try 1" in error
    assert said in error
    assert s.data_calls == 0


def test_a_temporary_failure_is_tried_again_and_the_mail_sent_once(
    db: sluice.Database, sink: tuple[Sink, int]
) -> None:
    s, port = sink
    s.data_answers = ["451 4.3.0 try again later", "250 OK"]
    _gateway(db, port, attempts=3)
    mid = db.queue("mail").put({"to": "ann@example.org", "subject": "s", "text": "t"})
    assert db.gateways.run_until_idle() == 1
    assert s.data_calls == 2
    ((_, _, mail),) = s.got
    assert mail["X-Sluice-Message-Id"] == mid
    assert _failed(db) == []


def test_temporary_failures_out_of_attempts_are_a_bad_response(
    db: sluice.Database, sink: tuple[Sink, int]
) -> None:
    s, port = sink
    s.data_answers = ["421 4.7.0 busy"]
    _gateway(db, port, attempts=2)
    db.queue("mail").put({"to": "ann@example.org", "subject": "s", "text": "t"})
    assert db.gateways.run_until_idle() == 1
    (error,) = _failed(db)
    assert "bad response" in error
    assert "421" in error
    assert "try 2" in error


def test_a_permanent_failure_is_refused_and_not_tried_again(
    db: sluice.Database, sink: tuple[Sink, int]
) -> None:
    s, port = sink
    s.data_answers = ["550 5.7.1 message rejected as spam"]
    _gateway(db, port, attempts=5)
    db.queue("mail").put({"to": "ann@example.org", "subject": "s", "text": "t"})
    assert db.gateways.run_until_idle() == 1
    assert s.data_calls == 1
    (error,) = _failed(db)
    assert "refused" in error
    assert "550" in error
    assert "spam" in error


def test_recipients_refused(db: sluice.Database, sink: tuple[Sink, int]) -> None:
    s, port = sink
    s.refuse = {"gone@example.org": "550 5.1.1 no such user",
                "later@example.org": "450 4.2.1 mailbox busy"}  # fmt: skip
    db.create_queue("bounces")
    _gateway(db, port, attempts=2, reply_queue="bounces")
    q = db.queue("mail")
    q.put({"to": "gone@example.org", "subject": "s", "text": "t"})
    q.put({"to": "later@example.org", "subject": "s", "text": "t"})
    partly = q.put({"to": ["gone@example.org", "ann@example.org"], "subject": "s", "text": "t"})
    assert db.gateways.run_until_idle() == 3
    gone, later = _failed(db)
    assert "refused" in gone
    assert "no such user" in gone
    assert "try 1" in gone  # a 5xx: not tried again
    assert "bad response" in later
    assert "try 2" in later  # a 4xx: tried again
    # Sent to one recipient and refused by another: delivered (not sent twice), the
    # refused recipients are the reply.
    ((_, recipients, _),) = s.got
    assert recipients == ["ann@example.org"]
    bounce = db.queue("bounces").get()
    assert bounce is not None
    assert bounce.correlation_id == partly
    assert bounce.body == {"refused": {"gone@example.org": "550 5.1.1 no such user"}}


def test_nobody_listening_is_disconnected(db: sluice.Database) -> None:
    _gateway(db, _free_port(), attempts=2)
    db.queue("mail").put({"to": "ann@example.org", "subject": "s", "text": "t"})
    assert db.gateways.run_until_idle() == 1
    (error,) = _failed(db)
    assert "disconnected" in error
    assert "try 2" in error


def test_no_answer_in_time_is_timed_out(db: sluice.Database, sink: tuple[Sink, int]) -> None:
    s, port = sink
    s.delay = 1.0
    _gateway(db, port, attempts=1, timeout=0.2)
    db.queue("mail").put({"to": "ann@example.org", "subject": "s", "text": "t"})
    assert db.gateways.run_until_idle() == 1
    (error,) = _failed(db)
    assert "timed out" in error


def test_one_connection_carries_many_mails(db: sluice.Database, sink: tuple[Sink, int]) -> None:
    s, port = sink
    _gateway(db, port)
    for n in range(5):
        db.queue("mail").put({"to": f"r{n}@example.org", "subject": f"#{n}", "text": "t"})
    assert db.gateways.run_until_idle() == 5
    assert s.greetings == 1
    assert [m["Subject"] for _, _, m in s.got] == [f"#{n}" for n in range(5)]  # queue order


def test_a_dropped_connection_is_opened_again(
    db: sluice.Database, sink: tuple[Sink, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sluice.gateways import smtp

    s, port = sink
    _gateway(db, port)
    gateway = db.gateways.get("mail")
    assert gateway is not None
    q = db.queue("mail")
    for n in range(3):
        q.put({"to": f"r{n}@example.org", "subject": f"#{n}", "text": "t"})
    out = smtp.SmtpOut(db, gateway)
    try:
        first, second, third = (q.get() for _ in range(3))
        assert first is not None
        assert second is not None
        assert third is not None
        out.deliver(first)
        kept = out._smtp
        assert kept is not None
        assert kept.sock is not None
        kept.sock.shutdown(socket.SHUT_RDWR)  # the connection went away while it idled
        # Idle past the limit: a NOOP finds it dropped and a new one carries the mail.
        monkeypatch.setattr(smtp, "IDLE", 0.0)
        out.deliver(second)
        assert s.greetings == 2
        # Dropped mid-send: disconnected (tried again by the sender), then a new one.
        monkeypatch.setattr(smtp, "IDLE", 3600.0)
        kept = out._smtp
        assert kept is not None
        assert kept.sock is not None
        kept.sock.shutdown(socket.SHUT_RDWR)
        with pytest.raises(DeliveryFailed) as failed:
            out.deliver(third)
        assert failed.value.kind == "disconnected"
        assert failed.value.retry
        out.deliver(third)
        assert s.greetings == 3
    finally:
        out.close()
    assert [m["Subject"] for _, _, m in s.got] == ["#0", "#1", "#2"]


def test_auth_with_the_right_password_and_refused_with_a_wrong_one(
    db: sluice.Database, sink: tuple[Sink, int]
) -> None:
    s, port = sink
    _gateway(db, port, username="ann", password="s3cret", auth_without_tls=True)
    db.queue("mail").put({"to": "bob@example.org", "subject": "s", "text": "t"})
    assert db.gateways.run_until_idle() == 1
    assert len(s.got) == 1
    db.gateways.define("mail", direction="out", transport="smtp", port=port,
                       sender="ann@example.org", username="ann", password="wrong",
                       auth_without_tls=True, attempts=3, backoff=0)  # fmt: skip
    db.queue("mail").put({"to": "bob@example.org", "subject": "s", "text": "t"})
    assert db.gateways.run_until_idle() == 1
    (error,) = _failed(db)
    assert "refused" in error
    assert "535" in error
    assert "try 1" in error


def _profile(db: sluice.Database) -> None:
    """2 an hour on weekdays 08:00-18:00 UTC, 5 an hour otherwise."""
    db.jobs.define("newsletter")
    db.jobs.set_profile(Profile(
        "newsletter", entries=(Entry.parse("mon-fri", "08:00-18:00", max_per_hour=2),),
        default_per_hour=5,
    ))  # fmt: skip


def test_the_profile_holds_sends_back_until_the_next_window(
    db: sluice.Database, clock: ManualClock, sink: tuple[Sink, int]
) -> None:
    s, port = sink
    _profile(db)
    _gateway(db, port, profile="newsletter")
    for n in range(10):
        db.queue("mail").put({"to": f"r{n}@example.org", "subject": f"#{n}", "text": "t"})
    start = clock.now()  # Friday 08:00 UTC: 2 an hour
    assert db.gateways.run_until_idle() == 2
    assert db.gateways.run_until_idle() == 0  # a new sender (a restart) counts on
    clock.advance(3599)
    assert db.gateways.run_until_idle() == 0
    clock.advance(1)  # 09:00: the next hour
    assert db.gateways.run_until_idle() == 2
    clock.set(start + 10 * 3600)  # 18:00: 5 an hour
    assert db.gateways.run_until_idle() == 5
    clock.advance(3600)
    assert db.gateways.run_until_idle() == 1
    assert [m["Subject"] for _, _, m in s.got] == [f"#{n}" for n in range(10)]
    used = db.jobs.usage(window_key("mail"), start)
    assert [(kind, at - start, n) for kind, at, n in used] == [
        ("hour", 0.0, 2), ("hour", 3600.0, 2), ("hour", 36000.0, 5), ("hour", 39600.0, 1)
    ]  # fmt: skip
    assert db.jobs.usage("newsletter", start) == []  # the task type's starts are its own


def test_a_mail_not_sent_gives_its_count_back(
    db: sluice.Database, clock: ManualClock, sink: tuple[Sink, int]
) -> None:
    s, port = sink
    _profile(db)
    _gateway(db, port, profile="newsletter")
    db.queue("mail").put({"to": "not an address", "subject": "s", "text": "t"})
    for n in range(3):
        db.queue("mail").put({"to": f"r{n}@example.org", "subject": f"#{n}", "text": "t"})
    assert db.gateways.run_until_idle() == 3  # the refused one and two mails
    assert len(_failed(db)) == 1
    assert [m["Subject"] for _, _, m in s.got] == ["#0", "#1"]


def test_a_sender_held_back_tells_until_when(
    db: sluice.Database, clock: ManualClock, sink: tuple[Sink, int]
) -> None:
    import threading

    from sluice.gateways.sender import Sender
    from sluice.gateways.smtp import SmtpOut

    _, port = sink
    _profile(db)
    _gateway(db, port, profile="newsletter")
    for n in range(3):
        db.queue("mail").put({"to": f"r{n}@example.org", "subject": f"#{n}", "text": "t"})
    gateway = db.gateways.get("mail")
    assert gateway is not None
    sender = Sender(db, gateway, SmtpOut(db, gateway), threading.Event())
    try:
        assert sender.send_one()
        assert sender.send_one()
        assert not sender.send_one()
        assert sender.held_until == clock.now() + 3600
        clock.advance(3600)
        assert sender.send_one()
        assert sender.held_until is None
    finally:
        sender.close()


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"port": "25"}, "port is a number"),
        ({"port": 25.5}, "port"),
        ({"timeout": 0}, "timeout"),
        ({"host": ""}, "host"),
        ({"host": "mail example"}, "host"),
        ({"starttls": "yes"}, "starttls is true or false"),
        ({"username": "ann"}, "both username and password"),
        ({"username": "ann", "password": "pw"}, "STARTTLS"),
        ({"sender": "not an address"}, "not an address"),
        ({"hostname": "mx.example.org"}, "no setting hostname"),
        ({"profile": "nothing"}, "no profile 'nothing'"),
    ],
)
def test_settings_that_cannot_work_are_refused(
    db: sluice.Database, settings: dict[str, Any], said: str
) -> None:
    with pytest.raises(ConfigurationError, match=said):
        db.gateways.define("mail", direction="out", transport="smtp", **settings)
    assert db.gateways.list() == []


def test_smtp_serves_only_outgoing_gateways(db: sluice.Database, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not serve direction 'in'"):
        db.gateways.define("inbox", direction="in", transport="smtp")
    db.jobs.define("plain")  # a task type with no profile is no profile
    with pytest.raises(ConfigurationError, match="no profile 'plain'"):
        db.gateways.define("mail", direction="out", transport="smtp", profile="plain")
    db.gateways.define("mail", direction="out", transport="smtp", username="ann",
                       password="pw", starttls=True)  # fmt: skip
    (gateway,) = db.gateways.list()
    assert gateway.transport == "smtp"
    _profile(db)  # a dropbox moves its messages itself: no profile limits it
    with pytest.raises(ConfigurationError, match="the dropbox transport moves them itself"):
        db.gateways.define("files", direction="out", transport="dropbox", root=str(tmp_path),
                           profile="newsletter")  # fmt: skip
