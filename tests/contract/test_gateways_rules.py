"""Gateway queues in the rules definition language (docs/rules.md, docs/gateways.md):
``CREATE QUEUE q KIND gateway IN|OUT TRANSPORT t [WITH (...)]``, checked when applied,
stored for ``sluice run``, and fed by rules like any queue; on every backend."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import sluice
from sluice.errors import RuleDefinitionError
from sluice.gateways import Gateway

FILE = "5.1140429201295000-0123456789.M"  # DropboxMQ's name: priority 5, an id, JSON


def test_a_rule_feeds_an_outgoing_gateway_and_an_incoming_one_feeds_a_rule(
    db: sluice.Database, tmp_path: Path
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    db.apply(f"""
        CREATE QUEUE inbox KIND gateway IN TRANSPORT dropbox WITH (root = '{tmp_path / "in"}');
        CREATE QUEUE outbox KIND gateway OUT TRANSPORT dropbox
            WITH (root = '{tmp_path / "out"}', keep_processed = false);
        CREATE RULE greet FOR inbox ENQUEUE json_object('hello', body.name) INTO outbox;
    """)
    assert {g.queue: g.direction for g in db.gateways.list()} == {"inbox": "in", "outbox": "out"}
    db.gateways.run_until_idle()  # the directories
    working = tmp_path / "in" / "inbox" / "incoming" / "working" / FILE
    working.write_text('{"name": "ann"}')
    target = tmp_path / "in" / "inbox" / "incoming" / "target"
    subprocess.run(["mv", str(working), str(target)], check=True)

    db.gateways.run_until_idle()  # the file in
    db.rules.run_until_idle()  # the rule
    db.gateways.run_until_idle()  # the message out

    (written,) = (tmp_path / "out" / "outbox" / "incoming" / "target").iterdir()
    assert json.loads(written.read_text()) == {"hello": "ann"}


def test_settings_of_every_kind_are_read(db: sluice.Database) -> None:
    db.apply("""
        CREATE QUEUE outbox KIND gateway OUT TRANSPORT http
            WITH (url = 'http://127.0.0.1:9/it''s', attempts = 7, backoff = 0.5,
                  max_backoff = -0, header_x = 'a');
    """)
    (g,) = db.gateways.list()
    assert g == Gateway("outbox", "out", "http", {
        "url": "http://127.0.0.1:9/it's", "attempts": 7, "backoff": 0.5, "max_backoff": 0,
        "header_x": "a"})  # fmt: skip
    again = db.apply(
        "CREATE QUEUE outbox KIND gateway OUT TRANSPORT http WITH (url = 'http://h/');"
    )
    assert again.queues["outbox"].gateway is not None
    (g,) = db.gateways.list()
    assert g.settings == {"url": "http://h/"}


def test_a_gateway_that_cannot_work_is_refused_with_its_line(db: sluice.Database) -> None:
    text = """CREATE QUEUE orders;
        CREATE QUEUE outbox KIND gateway OUT TRANSPORT pigeon;"""
    with pytest.raises(RuleDefinitionError, match="no transport 'pigeon'") as caught:
        db.apply(text)
    assert caught.value.line == 2
    assert db.gateways.list() == []
    assert "orders" not in [q.name for q in db.queues()]  # nothing of the file applied
    with pytest.raises(RuleDefinitionError, match="not an http or https URL"):
        db.apply("CREATE QUEUE o KIND gateway OUT TRANSPORT http WITH (url = 'ftp://x');")
    with pytest.raises(RuleDefinitionError, match=r"in or out after KIND gateway"):
        db.apply("CREATE QUEUE o KIND gateway SIDEWAYS TRANSPORT http;")
    with pytest.raises(RuleDefinitionError, match="a 'text', a number, true or false"):
        db.apply("CREATE QUEUE o KIND gateway OUT TRANSPORT http WITH (url = body.x);")
    with pytest.raises(RuleDefinitionError, match="given twice"):
        db.apply("CREATE QUEUE o KIND gateway OUT TRANSPORT http WITH (url = 'http://a/', "
                 "url = 'http://b/');")  # fmt: skip
    with pytest.raises(RuleDefinitionError, match="no profile 'mailing'") as caught:
        db.apply("CREATE QUEUE o KIND gateway OUT TRANSPORT http WITH (url = 'http://a/', "
                 "profile = 'mailing');")  # fmt: skip
    assert caught.value.line == 1
    assert db.gateways.list() == []


def test_no_rule_is_for_an_outgoing_gateway(db: sluice.Database) -> None:
    with pytest.raises(RuleDefinitionError, match="FOR outgoing gateway 'outbox'"):
        db.apply("""
            CREATE QUEUE outbox KIND gateway OUT TRANSPORT http WITH (url = 'http://h/');
            CREATE QUEUE audit;
            CREATE RULE copy FOR outbox ENQUEUE body INTO audit;
        """)


def test_a_queue_that_stops_being_a_gateway_loses_its_transport(db: sluice.Database) -> None:
    db.apply("CREATE QUEUE outbox KIND gateway OUT TRANSPORT http WITH (url = 'http://h/');")
    db.apply("CREATE QUEUE outbox;")
    assert db.gateways.list() == []
    db.apply("CREATE QUEUE outbox KIND gateway OUT TRANSPORT http WITH (url = 'http://h/');")
    db.apply("DROP QUEUE outbox;")
    assert db.gateways.list() == []


def test_sluice_gateways_lists_them_without_their_secrets(tmp_path: Path) -> None:
    import sys

    url = f"sqlite:///{tmp_path / 'g.db'}"
    with sluice.connect(url) as db:
        db.apply(
            "CREATE QUEUE outbox KIND gateway OUT TRANSPORT http "
            "WITH (url = 'http://h/', header_authorization = 'Bearer sk_secret');"
        )
    run = [sys.executable, "-m", "sluice.cli", "gateways", "--db", url]
    text = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert text.split("\t")[:3] == ["outbox", "out", "http"]
    listed = json.loads(subprocess.run([*run, "--json"], capture_output=True, text=True,
                                       check=True).stdout)  # fmt: skip
    assert listed[0]["settings"]["url"] == "http://h/"
    for shown in (text, json.dumps(listed)):
        assert "sk_secret" not in shown
