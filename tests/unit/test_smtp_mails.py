"""Building mails (sluice.gateways.smtp.mail_of) costs the same for the ten-thousandth as
for the first: the standard header registry made a new class for every header parsed
(14 a mail), each one slower to make as they piled up, and the gateway now keeps one per
header name.
"""

from __future__ import annotations

import gc
from email.headerregistry import BaseHeader

from sluice.gateways.smtp import mail_of
from sluice.message import Message, MessageState

_BODY = {
    "to": ["ann@example.org", "Bob Example <bob@example.org>"],
    "subject": "Hello, Ann ü",
    "text": "Dear Ann,\n",
    "headers": {"X-Campaign": "spring"},
}


def _message(n: int) -> Message:
    return Message(
        f"1/1/{n}", "mail", _BODY, "application/json", 0, {}, None, None,
        1.7e9, 1.7e9, None, 0, MessageState.CLAIMED,
    )  # fmt: skip


def test_mails_make_no_header_class_of_their_own() -> None:
    mail_of(_message(0), "news@example.org")  # each header name's class, made once
    gc.disable()  # classes are freed only by the cycle collector: none may go meanwhile
    try:
        before = len(BaseHeader.__subclasses__())
        mails = [mail_of(_message(n), "news@example.org") for n in range(1, 51)]
        assert len(BaseHeader.__subclasses__()) == before
    finally:
        gc.enable()
    assert [m["X-Sluice-Message-Id"] for m in mails[:2]] == ["1/1/1", "1/1/2"]
    assert mails[0]["Subject"] == "Hello, Ann ü"
    assert mails[0]["To"].addresses[1].display_name == "Bob Example"
