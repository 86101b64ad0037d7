"""The real ``sluice`` command, run as a subprocess."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sluice import connect
from sluice.cli import build_parser
from sluice.server.grants import Keys


def sluice(*args: str, db: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sluice.cli", *args, "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser by its name, those of groups ("keys add") too."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[prefix + name] = sub
                found |= _commands(sub, f"{prefix}{name} ")
    return found


def test_every_command_has_help() -> None:
    commands = _commands(build_parser())
    assert set(commands) >= {"demo", "queues", "create", "drop", "put", "get", "browse", "stats"}
    assert set(commands) >= {"keys", "keys add", "keys list", "keys revoke"}
    for name, sub in commands.items():
        assert sub.description, f"{name} has no help text"
        for option in sub._actions:
            if option.dest not in ("help",):
                assert option.help, f"{name} {option.dest} has no help text"


def test_queue_lifecycle_from_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    assert sluice("create", "orders", "--max-attempts", "3", db=db).returncode == 0
    put = sluice("put", "orders", '{"customer": "Smith"}', "--json-body", "--priority", "2", db=db)
    assert put.returncode == 0, put.stderr
    message_id = put.stdout.strip()
    browse = sluice("browse", "orders", "--json", db=db)
    (listed,) = json.loads(browse.stdout)
    assert (listed["id"], listed["body"], listed["priority"]) == (
        message_id,
        {"customer": "Smith"},
        2,
    )
    stats = json.loads(sluice("stats", "orders", "--json", db=db).stdout)
    assert stats["ready"] == 1
    got = sluice("get", "orders", "--json", db=db)
    assert json.loads(got.stdout)["body"] == {"customer": "Smith"}
    assert sluice("get", "orders", db=db).returncode == 3
    queues = json.loads(sluice("queues", "--json", db=db).stdout)
    assert [q["name"] for q in queues] == ["orders"]
    assert sluice("drop", "orders", db=db).returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("get", "nope"), "queue 'nope' does not exist"),
        (("put", "nope", "{bad", "--json-body"), "not valid JSON"),
        (("create", "bad name"), "invalid queue name"),
    ],
)
def test_errors_are_clear_and_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = sluice(*args, db=tmp_path / "q.db")
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_demo_passes_all_its_checks(tmp_path: Path) -> None:
    # A smaller mailing than the default 10,000, still late at its deadline. The
    # demo takes 45 s alone; beside three other workers and Spark on two cores it
    # took over 120 s in CI, so its bound is a hang's, not a speed target's.
    result = sluice("demo", "--json", "--readers", "5000", db=tmp_path / "demo.db", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    mailing = report["mailing"]
    assert mailing["received"] == 6000
    assert mailing["received_twice"] == mailing["over_limit_hours"] == 0
    assert mailing["turns_while_late"] > 0
    assert report["delivered"] == report["committed"] > 0
    assert report["killed_consumer_held"] > 0
    again = sluice("demo", db=tmp_path / "demo.db")
    assert again.returncode == 2
    assert "needs a fresh database" in again.stderr


def test_browse_and_get_select_and_order_by_content(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    assert sluice("create", "orders", db=db).returncode == 0
    for body in ('{"c": "Smith", "t": 5}', '{"c": "Jones", "t": 9}', '{"c": "Smith", "t": 7}'):
        assert sluice("put", "orders", body, "--json-body", db=db).returncode == 0
    shown = sluice(
        "browse", "orders", "--where", "body.c = 'Smith'", "--order-by", "body.t DESC", "--json",
        db=db,
    )  # fmt: skip
    assert [m["body"]["t"] for m in json.loads(shown.stdout)] == [7, 5]
    taken = sluice("get", "orders", "--where", "body.t > 8", "--json", db=db)
    assert json.loads(taken.stdout)["body"] == {"c": "Jones", "t": 9}
    bad = sluice("browse", "orders", "--where", "body.t > 'x' +", db=db)
    assert bad.returncode == 2
    assert "expression error at column 15" in bad.stderr


def test_isolated_queues_and_groups_from_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    assert sluice("create", "steps", "--isolation", "ordered", db=db).returncode == 0
    for body, group in (("a1", "A"), ("b1", "B"), ("a2", "A")):
        assert sluice("put", "steps", body, "--group", group, db=db).returncode == 0
    shown = json.loads(sluice("browse", "steps", "--json", db=db).stdout)
    assert [(m["body"], m["group"]) for m in shown] == [("a1", "A"), ("b1", "B"), ("a2", "A")]
    queues = json.loads(sluice("queues", "--settings", "--json", db=db).stdout)
    assert queues[0]["isolation"] == "ordered"
    bad = sluice("create", "other", "--isolation", "serializable", db=db)
    assert bad.returncode == 2


APP = """
import sluice

db = sluice.connect({url!r})
db.create_queue("sent", exist_ok=True)


@db.task("mail", max_attempts=2)
def mail(task):
    task.enqueue("sent", task.body)
"""


def test_worker_and_jobs_commands(tmp_path: Path) -> None:
    import signal
    import time

    import sluice as library

    db_path = tmp_path / "jobs.db"
    (tmp_path / "mailapp.py").write_text(APP.format(url=f"sqlite:///{db_path}"))
    with library.connect(f"sqlite:///{db_path}") as db:
        db.create_queue("sent", exist_ok=True)
        db.jobs.define("mail", max_attempts=2)
        job = db.jobs.submit("newsletter", [("mail", n) for n in range(50)])
        with subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", "worker", "mailapp:db", "--concurrency", "2"],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            text=True,
        ) as worker:
            give_up = time.monotonic() + 60
            while db.jobs.get(job).status != "done" and time.monotonic() < give_up:
                time.sleep(0.05)  # another process's progress: looked at, not signalled
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        assert "stopped after 50 task(s)" in err
        assert db.queue("sent").stats()["ready"] == 50
    listed = json.loads(sluice("jobs", "--json", db=db_path).stdout)
    assert [(j["id"], j["status"], j["progress"]) for j in listed] == [(job, "done", 1.0)]
    watched = sluice("jobs", "--watch", job, "--once", db=db_path)
    assert watched.returncode == 0
    assert "100.0% 50/50 ok=50 failed=0" in watched.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "worker", "nosuchmodule:db"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "cannot import 'nosuchmodule'" in bad.stderr


def test_topics_from_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert sluice("create", "events", "--topic", db=db).returncode == 0
    assert sluice("subscribe", "events", "all", db=db).returncode == 0
    big = sluice("subscribe", "events", "big", "--where", "body.n > 1", db=db)
    assert big.returncode == 0, big.stderr
    for n in (1, 2, 3):
        assert sluice("put", "events", f'{{"n": {n}}}', "--json-body", db=db).returncode == 0
    lag = json.loads(sluice("stats", "--json", db=db).stdout)
    assert {(r["name"], r["lag"]) for r in lag if r["kind"] == "subscription"} == {
        ("all", 3),
        ("big", 2),
    }
    first = json.loads(sluice("browse", "all", "--limit", "1", "--json", db=db).stdout)
    rest = sluice("browse", "all", "--after", first[0]["position"], "--json", db=db)
    assert [m["body"]["n"] for m in first + json.loads(rest.stdout)] == [1, 2, 3]
    got = sluice("get", "big", "--json", db=db)
    assert json.loads(got.stdout)["body"] == {"n": 2}
    assert sluice("unsubscribe", "big", db=db).returncode == 0
    for bad in (
        ("subscribe", "nothere", "x"),  # no such topic
        ("subscribe", "events", "all"),  # taken
        ("subscribe", "events", "x", "--where", "body.n >"),  # does not parse
        ("put", "all", "x"),  # a subscription is not published to
        ("get", "events"),  # a topic is read through subscriptions
        ("create", "t2", "--topic", "--max-attempts", "3"),
    ):
        result = sluice(*bad, db=db)
        assert result.returncode == 2, bad
        assert "error" in result.stderr
    names = json.loads(sluice("queues", "--json", db=db).stdout)
    assert sorted(q["name"] for q in names) == ["all", "events"]


def test_pause_and_resume_from_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    assert sluice("create", "orders", db=db).returncode == 0
    paused = sluice("pause", "orders", "--json", db=db)
    assert paused.returncode == 0, paused.stderr
    assert json.loads(paused.stdout) == {"queue": "orders", "paused": True}
    assert sluice("put", "orders", "o1", db=db).returncode == 0  # producers go on
    assert sluice("get", "orders", db=db).returncode == 3  # consumers get nothing
    stats = sluice("stats", "orders", db=db)
    assert ["ready", "1"] in [line.split() for line in stats.stdout.splitlines()]
    assert "paused" in stats.stdout
    assert json.loads(sluice("stats", "orders", "--json", db=db).stdout)["paused"] is True
    header, row = sluice("queues", db=db).stdout.splitlines()
    assert header.split()[-1] == "PAUSED"
    assert row.split()[-1] == "yes"
    (listed,) = json.loads(sluice("queues", "--json", db=db).stdout)
    assert listed["paused"] is True
    assert sluice("resume", "orders", db=db).stdout.strip() == "resumed orders"
    assert json.loads(sluice("get", "orders", "--json", db=db).stdout)["body"] == "o1"
    assert json.loads(sluice("queues", "--json", db=db).stdout)[0]["paused"] is False
    missing = sluice("pause", "nope", db=db)
    assert missing.returncode == 2
    assert "queue 'nope' does not exist" in missing.stderr


def test_purge_ready_from_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    assert sluice("create", "orders", db=db).returncode == 0
    for args in (("o1",), ("o2",), ("later", "--delay", "3600")):
        assert sluice("put", "orders", *args, db=db).returncode == 0
    purged = sluice("purge", "orders", "ready", db=db)
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.strip() == "purged 3 ready message(s)"
    assert json.loads(sluice("purge", "orders", "ready", "--json", db=db).stdout) == {"purged": 0}
    stats = json.loads(sluice("stats", "orders", "--json", db=db).stdout)
    assert (stats["ready"], stats["delayed"]) == (0, 0)
    missing = sluice("purge", "nope", "ready", db=db)
    assert missing.returncode == 2
    assert "queue 'nope' does not exist" in missing.stderr


def test_api_keys_from_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    added = sluice(
        "keys", "add", "orders-app", "--grant", "orders*:produce,consume",
        "--grant", "audit:browse", db=db,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    secret = added.stdout.strip()
    assert secret.startswith("sk_")
    assert "\n" not in secret  # stdout holds the secret alone, for scripts
    assert "cannot be shown again" in added.stderr
    admin = sluice("keys", "add", "ops", "--admin", "--json", db=db)
    assert json.loads(admin.stdout)["name"] == "ops"
    listed = sluice("keys", "list", db=db)
    assert listed.returncode == 0, listed.stderr
    header, ops, app = listed.stdout.splitlines()
    assert header.split() == ["NAME", "GRANTS", "CREATED", "USED", "REVOKED"]
    assert ops.split()[:2] == ["ops", "admin"]
    assert app.split()[:3] == ["orders-app", "orders*:consume,produce", "audit:browse"]
    assert app.split()[-2:] == ["never", "-"]
    assert secret not in listed.stdout
    with connect(f"sqlite:///{db}") as database:
        principal = Keys(database).authenticate(secret)
    assert principal is not None
    assert principal.allows("orders.eu", "consume")
    assert not principal.allows("audit", "consume")
    assert sluice("keys", "revoke", "orders-app", db=db).returncode == 0
    (shown,) = [k for k in json.loads(sluice("keys", "list", "--json", db=db).stdout)
                if k["name"] == "orders-app"]  # fmt: skip
    assert shown["revoked_at"] is not None
    assert shown["used_at"] is not None  # the authentication above
    assert "secret" not in shown
    with connect(f"sqlite:///{db}") as database:
        assert Keys(database).authenticate(secret) is None
    for bad, message in (
        (("keys", "revoke", "nobody"), "no API key named 'nobody'"),
        (("keys", "add", "ops", "--admin"), "'ops' exists already"),
        (("keys", "add", "x", "--grant", "orders"), "has no colon"),
        (("keys", "add", "x", "--grant", "orders:fly"), "unknown action(s) 'fly'"),
        (("keys", "add", "bad name", "--admin"), "invalid API key name"),
        (("keys", "add", "idle"), "would allow nothing"),
    ):
        result = sluice(*bad, db=db)
        assert result.returncode == 2, bad
        assert message in result.stderr, bad
        assert "Traceback" not in result.stderr
    alone = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "keys"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert alone.returncode == 2
    assert "required: ACTION" in alone.stderr  # a group needs one of its commands
