"""A short fault campaign on each backend (tests/reliability/campaign.py; `make campaign`
runs a long one), and the checker shown to catch each kind of violation."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import sluice

from .campaign import CLOCKED, ROOT, campaign_on, stepped_clock
from .campaign_checks import (
    check_made,
    check_rule_errors,
    check_served,
    check_stream,
    tracebacks,
)

pytestmark = pytest.mark.slow

SECONDS = 15.0


def _tx(w: str, t: int, s: int, k: int, *, x: bool = False) -> list[dict[str, Any]]:
    return [{"w": w, "t": t, "s": s + i, "k": k, "x": x} for i in range(k)]


def test_the_checker_names_every_kind_of_violation() -> None:
    one, two = _tx("p.1", 1, 0, 2), _tx("p.1", 2, 2, 3)
    committed = {("p.1", 1): {"s": 0, "k": 2}, ("p.1", 2): {"s": 2, "k": 3}}
    committing = {("p.1", 1), ("p.1", 2)}
    assert check_stream("out", one + two, committed, committing) == []
    lost = check_stream("out", one, committed, committing)
    assert lost == ["out: committed transaction ('p.1', 2) lost [2, 3, 4]"]
    doubled = check_stream("out", one + two + two[:1], committed, committing)
    assert "out: ('p.1', 2) delivered 2 times" in doubled
    partial = check_stream("out", one + two[:2], committed, committing)
    assert "out: transaction ('p.1', 2) seen in part: 2 of 3" in partial
    aborted = _tx("p.1", 3, 5, 1, x=True)
    assert "out: ('p.1', 5) of an aborted transaction is visible" in check_stream(
        "out", one + two + aborted, committed, committing | {("p.1", 3)}
    )
    unannounced = check_stream("out", one + two + _tx("p.1", 3, 5, 1), committed, committing)
    assert unannounced == ["out: transaction ('p.1', 3) is visible but never reached its commit"]
    swapped = check_stream("out", two + one, committed, committing)
    assert swapped == ["out: writer p.1 out of order: 0 after 4"]
    # On a grouped queue the order promised is each group's: transactions of one writer
    # in two groups may pass each other, two of one group may not.
    in_groups = [b | {"g": "g1"} for b in two] + [b | {"g": "g0"} for b in one]

    def by_group(b: dict[str, Any]) -> str:
        return f"{b['w']} in {b['g']}"

    assert check_stream("out", in_groups, committed, committing, order=by_group) == []
    one_group = [b | {"g": "g0"} for b in two + one]
    assert check_stream("out", one_group, committed, committing, order=by_group) == [
        "out: writer p.1 in g0 out of order: 0 after 4"
    ]


def test_the_rules_checkers_name_every_kind_of_violation() -> None:
    made = [{"w": "o.1", "s": 0}, {"w": "o.1", "s": 2}]
    expected = {("o.1", 0), ("o.1", 2)}
    assert check_made("echoed", made, expected) == []
    assert check_made("echoed", made + made[:1], expected) == ["echoed: ('o.1', 0) made 2 times"]
    assert check_made("echoed", made[1:], expected) == ["echoed: ('o.1', 0) never made"]
    assert check_made("echoed", made, {("o.1", 2)}) == [
        "echoed: ('o.1', 0) made for an order that did not ask"
    ]

    def error(n: float, rule: str = "count") -> dict[str, Any]:
        return {"error": "message", "rule": rule, "trigger": {"body": {"w": "o.1", "n": n}}}

    assert check_rule_errors([error(2.5)]) == []
    assert len(check_rule_errors([error(2)])) == 1  # an integer fits the property
    assert len(check_rule_errors([error(2.5, rule="route")])) == 1


def test_the_http_checker_names_every_kind_of_violation() -> None:
    def took(s: int, token: str, asked: float, got: float) -> dict[str, Any]:
        return {"took": ["h.1", s], "token": token, "asked": asked, "got": got}

    def ack(s: int, token: str, sent: float, at: float) -> list[dict[str, Any]]:
        return [
            {"acking": ["h.1", s], "token": token, "sent": sent},
            {"acked": ["h.1", s], "token": token, "at": at},
        ]

    routed = {("h.1", 0), ("h.1", 1), ("h.1", 2)}
    # 0 taken and acknowledged, 1 taken with its ack unanswered, 2 left for the drain
    events = [took(0, "a", 1, 2), took(1, "b", 1, 2), *ack(0, "a", 3, 4)]
    events.append({"acking": ["h.1", 1], "token": "b", "sent": 3})
    left = [{"w": "h.1", "s": 2}]
    assert check_served(left, events, routed) == []
    assert check_served([], events, routed) == [
        "served: ('h.1', 2) lost (neither left nor acknowledged)"
    ]
    assert check_served(left + left, events, routed) == ["served: ('h.1', 2) left 2 times"]
    assert check_served([*left, {"w": "h.1", "s": 0}], events, routed) == [
        "served: ('h.1', 0) acknowledged and delivered again"
    ]
    assert check_served(left, events, routed - {("h.1", 2)}) == [
        "served: ('h.1', 2) delivered but never routed"
    ]
    again = check_served(left, [*events, took(0, "c", 5, 6)], routed)
    assert again == ["served: ('h.1', 0) taken again after its acknowledgement"]
    # c got 0 while a held it, and a's later ack was accepted all the same
    held = check_served(left, [took(0, "a", 1, 2), took(0, "c", 2.5, 2.7), *ack(0, "a", 3, 4)],
                        routed - {("h.1", 1)})  # fmt: skip
    assert held == ["served: ('h.1', 0) acknowledged while another lease held it"]


def test_tracebacks_are_found_with_their_last_exception() -> None:
    lines = [
        "sluice heartbeat failed; retrying",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "sqlite3.OperationalError: database or disk is full",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "y.py", line 2, in g',
        "sluice.errors.StorageError: full",
        "ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "z.py", line 3, in h',
        "KeyError: 'x'",
    ]
    assert tracebacks(lines) == [
        ("sluice heartbeat failed; retrying", "sluice.errors.StorageError: full", 10),
        ("ERROR:    Exception in ASGI application", "KeyError: 'x'", 14),
    ]


def test_a_writer_whose_lease_was_lost_keeps_its_order(tmp_path: Path) -> None:
    """The campaign's finding: a producer stalled past its lease (a loaded machine) went on
    under a new session, and an ordered queue took that for a new writer, whose messages a
    second reader could take before the first writer's were done."""
    url = f"sqlite:///{tmp_path / 'ordered.db'}"
    with sluice.connect(url) as reader, sluice.connect(url) as writer:
        reader.create_queue("steps", isolation="ordered")
        writer.queue("steps").put("first")
        stalled = writer.context.session
        with sqlite3.connect(tmp_path / "ordered.db") as conn:  # its heartbeat long past
            conn.execute(
                "UPDATE sessions SET heartbeat_at = 0, heartbeat_mono = 0 WHERE id = ?", (stalled,)
            )
        assert stalled in reader.recover()
        writer.context._tick()  # its lease keeper's next beat: a new session
        assert writer.context.session != stalled
        writer.queue("steps").put("second")
        first, second = reader.begin(), reader.begin()
        assert [m.body for m in first.dequeue("steps")] == ["first"]
        assert second.dequeue("steps") == []  # the writer is the first reader's until it ends
        first.commit()
        assert [m.body for m in second.dequeue("steps")] == ["second"]
        second.commit()


def test_an_actor_under_a_stepped_clock_sleeps(tmp_path: Path) -> None:
    """libfaketime 0.9.10 failed every time.sleep of Python 3.11 with EINVAL (its absolute
    deadline on the monotonic clock, wolfcw/libfaketime#426); the campaign's actors run
    through campaign_clock, whose sleep works, and their wall clock is still stepped."""
    clock = tmp_path / "clock"
    clock.write_text("-30\n")
    (tmp_path / "probe_sleep.py").write_text(
        "import json, time\n"
        "began = time.monotonic()\n"
        "time.sleep(0.05)\n"
        "print(json.dumps({'wall': time.time(), 'slept': time.monotonic() - began}))\n"
    )
    env = os.environ | stepped_clock(clock) | {"PYTHONPATH": str(tmp_path)}
    ran = subprocess.run([*CLOCKED, "probe_sleep"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    said = json.loads(ran.stdout)
    assert 0.05 <= said["slept"] < 5
    assert -35 < said["wall"] - time.time() < -25  # the wall clock is the stepped one


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_short_campaign_loses_nothing_and_shows_nothing_uncommitted(
    backend: str, tmp_path: Path
) -> None:
    outcome = campaign_on(backend, seed=11, seconds=SECONDS, tmp=tmp_path)
    assert outcome.violations == []
    assert sum(outcome.kills.values()) >= 5  # the faults happened ...
    assert outcome.reported_txs["in"] > 100  # ... under load
    assert outcome.reported_jobs > 5
    assert outcome.checked["out"] >= outcome.reported_txs["in"]
    assert outcome.reported_txs["orders"] > 10  # the rules' input ...
    assert outcome.routed_by_run > 0  # ... routed by sluice run
    assert outcome.reported_txs["web_in"] > 0  # sluice serve answered
    assert outcome.reported_txs["dropped"] > 10  # files dropped ...
    assert outcome.checked["dropped"] >= outcome.reported_txs["dropped"]
    assert outcome.checked["out_grouped"] >= outcome.reported_txs["in"]
    assert outcome.checked["relayed"] == outcome.checked["routed"]
