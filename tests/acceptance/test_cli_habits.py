"""The CLI's habits a newcomer relies on (issue 39): options anywhere, JSON bodies, stdin
batches, tables with depths, pages that say there is more, names that say "did you mean",
the database named when it is made, shell completion and a live tail.

Most run ``sluice.cli.main`` in-process (the parser and the commands are the same code the
console script runs); what needs a process of its own (stdin, signals, completion) runs one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sluice
from sluice.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLUICE_URL", raising=False)
    monkeypatch.delenv("SLUICE_DB", raising=False)
    return tmp_path / "q.db"


def test_global_options_go_before_or_after_the_command(
    capsys: pytest.CaptureFixture[str], db_path: Path
) -> None:
    assert run(capsys, "--db", str(db_path), "create", "orders")[0] == 0
    assert run(capsys, "create", "audit", "--db", str(db_path))[0] == 0
    code, out, _ = run(capsys, "--db", str(db_path), "--json", "queues")
    assert code == 0
    assert [q["name"] for q in json.loads(out)] == ["audit", "orders"]
    assert not (db_path.parent / "sluice.db").exists()  # the default was never touched


def test_a_new_database_is_named_and_a_mistyped_url_refused(
    capsys: pytest.CaptureFixture[str], db_path: Path
) -> None:
    code, out, err = run(capsys, "create", "orders")
    assert code == 0
    assert f"no --db or SLUICE_URL given, so created a new database {db_path.parent}" in err
    assert out.strip() == "created queue orders in sqlite:///sluice.db"
    code, _, err = run(capsys, "create", "other")  # it exists now: nothing to say
    assert "created a new database" not in err
    for url in ("memory:", "memory", "sqlite:/abs.db"):
        code, _, err = run(capsys, "--db", url, "queues")
        assert code == 2
        assert "sluice: error:" in err
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["sluice.db"]


def test_the_old_environment_variable_is_refused_when_it_disagrees(
    capsys: pytest.CaptureFixture[str], db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLUICE_URL", str(db_path))
    monkeypatch.setenv("SLUICE_DB", "other.db")
    code, _, err = run(capsys, "queues")
    assert code == 2
    assert "SLUICE_URL and SLUICE_DB name different databases" in err


def test_bodies_are_json_when_they_parse(capsys: pytest.CaptureFixture[str], db_path: Path) -> None:
    db = str(db_path)
    run(capsys, "create", "orders", "--db", db)
    assert run(capsys, "put", "orders", '{"a": 1}', "--db", db)[0] == 0
    assert run(capsys, "put", "orders", "42", "--db", db)[0] == 0
    assert run(capsys, "put", "orders", '{"a": 1}', "--text", "--db", db)[0] == 0
    assert run(capsys, "put", "orders", "hello world", "-p", "region=EU", "-p", "n=5",
               "--db", db)[0] == 0  # fmt: skip
    with sluice.connect(db) as database:
        shown = database.queue("orders").browse()
        assert [m.body for m in shown] == [{"a": 1}, 42, '{"a": 1}', "hello world"]
        assert shown[3].properties == {"region": "EU", "n": 5}
        # What the newcomer met: a selector on body.a now finds the JSON body.
        assert [m.body for m in database.queue("orders").browse(where="body.a = 1")] == [{"a": 1}]
    code, _, err = run(capsys, "put", "orders", "x", "-p", "novalue", "--db", db)
    assert code == 2
    assert "--properties wants NAME=VALUE" in err


def test_standard_input_gives_one_body_or_a_batch_of_json_lines(db_path: Path) -> None:
    db = str(db_path)

    def put(data: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sluice.cli", "put", "orders", "-", "--db", db, *extra],
            input=data, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    with sluice.connect(db) as database:
        database.create_queue("orders")
    batch = put('{"n": 1}\n{"n": 2}\n\n{"n": 3}\n')
    assert batch.returncode == 0, batch.stderr
    assert len(batch.stdout.split()) == 3  # an id a line
    assert put('{\n  "n": 4\n}\n').returncode == 0  # one document over several lines
    assert put("plain text\n").returncode == 0
    assert put("line one\nline two\n", "--text").returncode == 0
    bad = put('{"n": 5}\nnot json\n')
    assert bad.returncode == 2
    assert "standard input line 2 is not JSON" in bad.stderr
    with sluice.connect(db) as database:
        bodies = [m.body for m in database.queue("orders").browse()]
    assert bodies == [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}, "plain text",
                      "line one\nline two"]  # fmt: skip


def test_get_reports_the_state_it_left_the_message_in(
    capsys: pytest.CaptureFixture[str], db_path: Path
) -> None:
    db = str(db_path)
    run(capsys, "create", "orders", "--db", db)
    run(capsys, "put", "orders", "1", "--db", db)
    _, out, _ = run(capsys, "get", "orders", "--release", "--json", "--db", db)
    assert json.loads(out)["state"] == "ready"
    _, out, _ = run(capsys, "get", "orders", "--json", "--db", db)
    assert json.loads(out)["state"] == "done"


def test_queues_and_stats_are_tables_with_depths_lag_and_age(
    capsys: pytest.CaptureFixture[str], db_path: Path
) -> None:
    db = str(db_path)
    an_hour_ago = sluice.ManualClock(time.time() - 3600)  # the messages have waited an hour
    with sluice.connect(db, clock=an_hour_ago) as database:
        database.create_queue("orders", error_queue="orders.failed", max_attempts=1)
        database.create_topic("events")
        database.subscribe("events", "audit")
        database.queue("orders").put_many([1, 2, 3])
        database.queue("events").put({"e": 1})
        database.queue("orders.failed").put("x")
    code, out, _ = run(capsys, "queues", "--db", db)
    assert code == 0
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["NAME", "KIND", "READY", "DELAYED", "CLAIMED", "DEPTH", "OLDEST", "LAG",
                        "ERRORS", "PAUSED"]  # fmt: skip
    rows = {line[0]: line for line in lines[1:]}
    assert rows["orders"][2] == "3"  # ready
    assert rows["orders"][6].startswith("1h")  # the oldest has waited an hour
    assert rows["orders"][-1] == "1"  # its error queue holds one
    assert rows["audit"][1:3] == ["subscription", "of"]  # "subscription of events"
    assert rows["audit"][4] == "1"  # the topic's message waits for it: ready 1
    _, out, _ = run(capsys, "stats", "--json", "--db", db)
    audit = next(r for r in json.loads(out) if r["name"] == "audit")
    assert (audit["ready"], audit["lag"]) == (1, 1)
    assert audit["oldest_ready_age"] >= 3600
    code, out, _ = run(capsys, "stats", "--db", db)
    assert out.splitlines()[0].split()[:2] == ["NAME", "KIND"]  # not "(no subscriptions)"


def test_browse_has_a_header_and_says_how_many_more(
    capsys: pytest.CaptureFixture[str], db_path: Path
) -> None:
    db = str(db_path)
    with sluice.connect(db) as database:
        database.create_queue("orders").put_many([{"n": n} for n in range(25)])
    code, out, err = run(capsys, "browse", "orders", "--db", db)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["POSITION", "ID", "PRIORITY", "ENQUEUED", "ATTEMPTS", "BODY"]
    assert len(lines) == 21
    assert "5 more; the next page: sluice browse orders --state ready --after 0:20" in err
    _, out, err = run(capsys, "browse", "orders", "--limit", "30", "--db", db)
    assert len(out.splitlines()) == 26
    assert "more" not in err
    with pytest.raises(SystemExit) as refused:  # argparse's own refusal
        main(["browse", "orders", "--limit", "0", "--db", db])
    assert refused.value.code == 2
    assert "not a whole number of 1 or more" in capsys.readouterr().err


def test_failed_messages_show_their_error(
    capsys: pytest.CaptureFixture[str], db_path: Path
) -> None:
    db = str(db_path)
    with sluice.connect(db) as database:
        q = database.create_queue("orders", max_attempts=1)
        q.put("x")
        m = q.get()
        assert m is not None
        m.reject("the printer is on fire")
    _, out, _ = run(capsys, "browse", "orders", "--state", "failed", "--db", db)
    header, row = out.splitlines()
    assert "ERROR" in header.split()
    assert "the printer is on fire" in row


def test_a_misspelt_name_gets_did_you_mean_and_the_cli_command(
    capsys: pytest.CaptureFixture[str], db_path: Path
) -> None:
    db = str(db_path)
    run(capsys, "create", "orders", "--db", db)
    run(capsys, "create", "events", "--topic", "--db", db)
    code, _, err = run(capsys, "put", "ordrs", "1", "--db", db)
    assert code == 2
    assert "queue 'ordrs' does not exist (did you mean 'orders'?)" in err
    assert "create it with: sluice create ordrs" in err
    assert "db.create_queue" not in err  # Python advice is for Python's readers
    code, _, err = run(capsys, "subscribe", "evnts", "audit", "--db", db)
    assert "topic 'evnts' does not exist (did you mean 'events'?)" in err
    assert "sluice create evnts --topic" in err


def test_a_put_nobody_will_receive_says_so(
    capsys: pytest.CaptureFixture[str], db_path: Path
) -> None:
    db = str(db_path)
    run(capsys, "create", "events", "--topic", "--db", db)
    code, _, err = run(capsys, "put", "events", "1", "--db", db)
    assert code == 0
    assert "topic events has no subscriptions, so nobody will receive this message" in err
    run(capsys, "subscribe", "events", "audit", "--db", db)
    _, _, err = run(capsys, "put", "events", "2", "--db", db)
    assert "no subscriptions" not in err


def test_a_worker_refuses_a_db_its_app_does_not_use(
    capsys: pytest.CaptureFixture[str], db_path: Path
) -> None:
    code, _, err = run(capsys, "worker", "myapp:db", "--db", str(db_path))
    assert code == 2
    assert "sluice worker runs on the Database that myapp:db connects to" in err


def test_shell_completion(tmp_path: Path) -> None:
    script = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "completion", "bash"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "complete" in script.stdout
    assert "sluice" in script.stdout
    answer = tmp_path / "answer"
    line = "sluice que"
    env = os.environ | {
        "_ARGCOMPLETE": "1",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        "_ARGCOMPLETE_IFS": "\n",
    }
    subprocess.run(
        [sys.executable, "-m", "sluice.cli"], env=env, capture_output=True, timeout=60, check=False
    )
    assert answer.read_text().split() == ["queues"]


def test_tail_follows_a_queue_live_and_takes_nothing(db_path: Path) -> None:
    db = str(db_path)
    with sluice.connect(db) as database:
        q = database.create_queue("orders")
        q.put({"n": 0})  # there before tail starts: not shown without --from-start
        with subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", "tail", "orders", "--json", "-n", "2",
             "--poll", "0.2", "--db", db],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ) as tail:  # fmt: skip
            assert tail.stderr is not None
            assert "following orders" in tail.stderr.readline()  # it is looking now
            q.put_many([{"n": 1}, {"n": 2}, {"n": 3}])
            out, _ = tail.communicate(timeout=60)
        assert tail.returncode == 0
        assert [json.loads(line)["body"]["n"] for line in out.splitlines()] == [1, 2]
        assert q.stats()["ready"] == 4  # nothing taken


def test_keys_name_their_database_and_list_times_as_iso(
    capsys: pytest.CaptureFixture[str], db_path: Path
) -> None:
    from datetime import datetime

    code, out, err = run(capsys, "keys", "add", "ops", "--admin", "--db", str(db_path))
    assert code == 0
    assert f"added the key 'ops' to {db_path}" in err
    _, out, _ = run(capsys, "keys", "list", "--json", "--db", str(db_path))
    (key,) = json.loads(out)
    assert datetime.fromisoformat(key["created_at"]).tzinfo is not None
    assert key["used_at"] is None
