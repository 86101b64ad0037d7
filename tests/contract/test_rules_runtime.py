"""Issue 40's rules semantics on every backend: a run-time failure of a rule's expression
(a division by zero, a CAST whose text does not convert) makes the message's error
message, saying what failed; numbers come out the same (7, not 7.0) whatever the
database; json_object takes a condition as a value. tests/spark/test_rules_spark.py
runs RUNTIME on Spark and compares it with what this module's engine makes."""

from __future__ import annotations

import json
from typing import Any, Final

import sluice

RUNTIME: Final = """
CREATE QUEUE inbox ERRORQUEUE inboxErrors;
CREATE QUEUE inboxErrors;
CREATE QUEUE out;
CREATE RULE ratio FOR inbox IF body.kind = 'ratio'
    THEN ENQUEUE json_object('r', body.n / body.d, 'ok', body.n < 10) INTO out;
CREATE RULE number FOR inbox IF body.kind = 'number'
    THEN ENQUEUE json_object('x', CAST(body.x AS INT), 'twice', body.n * 2) INTO out,
         ENQUEUE CAST(body.x AS DOUBLE) INTO out;
"""

MESSAGES: Final = [
    {"kind": "ratio", "n": 6, "d": 4},
    {"kind": "ratio", "n": 1, "d": 0},
    {"kind": "number", "x": "7", "n": 4},
    {"kind": "number", "x": "seven", "n": 4},
    {"kind": "number", "x": 7.9, "n": 2.5},
]


def outcome(db: sluice.Database) -> tuple[list[Any], list[tuple[Any, ...]]]:
    """What the rules made of MESSAGES: the bodies in ``out`` as JSON text (8 and 8.0 told
    apart), and the error messages' error, rule, message and trigger body."""
    made = [sluice.message.encode_json(m.body) for m in db.queue("out").browse(limit=100)]
    errors = [
        (e["error"], e["rule"], e["message"], e["trigger"]["body"])
        for e in (m.body for m in db.queue("inboxErrors").browse(limit=100))
    ]
    return made, errors


EXPECTED: Final = (
    [
        '{"r":1.5,"ok":true}',
        '{"x":7,"twice":8}',
        "7",
        '{"x":7,"twice":5}',
        "7.9",
    ],
    [
        ("evaluation", "ratio", "division by zero in body.n / body.d", MESSAGES[1]),
        (
            "evaluation",
            "number",
            'CAST(body.x AS INT): the text "seven" is not a number',
            MESSAGES[3],
        ),
    ],
)


def test_run_time_failures_are_error_messages_and_numbers_print_alike(
    db: sluice.Database,
) -> None:
    db.apply(RUNTIME)
    db.queue("inbox").put_many(MESSAGES)
    stats = db.rules.run_until_idle()
    assert (stats.processed, stats.errors) == (5, 2)
    made, errors = outcome(db)
    assert sorted(made) == sorted(EXPECTED[0])  # the order of keys is the database's
    assert errors == EXPECTED[1]
    assert db.queue("inbox").browse() == []  # none left ready to fail again


def test_a_selector_that_divides_by_zero_matches_nothing(db: sluice.Database) -> None:
    """Selectors are not rules: a failure there is NULL (not matched), never an error that
    one message would raise at every dequeue."""
    q = db.create_queue("q")
    q.put_many([{"n": 1, "d": 0}, {"n": 4, "d": 2}, {"x": "seven"}])
    assert [m.body["n"] for m in q.browse(where="body.n / body.d > 1")] == [4]
    assert q.browse(where="CAST(body.x AS DOUBLE) > 1") == []


def test_a_run_time_error_goes_to_its_rules_error_queue(db: sluice.Database) -> None:
    """The database names no rule when it raises: the error still goes where the rule's
    ERRORQUEUE says, before its queue's."""
    db.apply("""
        CREATE QUEUE inbox ERRORQUEUE inboxErrors; CREATE QUEUE inboxErrors;
        CREATE QUEUE ruleErrors; CREATE QUEUE out;
        CREATE RULE split FOR inbox ERRORQUEUE ruleErrors
            IF true THEN ENQUEUE json_array(body.total / body.parts) INTO out;
    """)
    db.queue("inbox").put_many([{"total": 9, "parts": 3}, {"total": 9, "parts": 0}])
    assert db.rules.run_until_idle().errors == 1
    assert [m.body for m in db.queue("out").browse()] == [[3]]
    assert db.queue("inboxErrors").browse() == []
    (error,) = [m.body for m in db.queue("ruleErrors").browse()]
    assert (error["rule"], error["message"]) == (
        "split",
        "division by zero in body.total / body.parts",
    )


def test_with_values_are_written_as_every_engine_writes_numbers(
    db: sluice.Database, monkeypatch: Any
) -> None:
    """A WITH value's JSON in the properties: 2.5 * 2 is 5, not 5.0, by the SQL enqueue
    and by the Python path alike (the SQL enqueue off: every batch by Python)."""
    from sluice.rules import engine

    text = """
    CREATE QUEUE i; CREATE QUEUE o;
    CREATE PROPERTY r AS real QUEUE o; CREATE PROPERTY k AS integer QUEUE o;
    CREATE RULE x FOR i IF true THEN ENQUEUE json_object('n', body.n) INTO o
        WITH r = body.n * 2, k = body.n * 2;
    """
    db.apply(text)
    db.queue("i").put_many([{"n": 2}, {"n": 2.5}])
    db.rules.run_until_idle()
    monkeypatch.setattr(engine, "build_fast", lambda app, backend, plan, **_: {})
    db.rules.reload()
    db.apply(text.replace("QUEUE i;", "QUEUE i RETENTION 1 s;"))  # a new version: compiled again
    db.queue("i").put_many([{"n": 2.5}])
    db.rules.run_until_idle()
    written = [json.dumps({k: m.properties[k] for k in ("r", "k")}) for m in db.queue("o").browse()]
    assert written == ['{"r": 4, "k": 4}', '{"r": 5, "k": 5}', '{"r": 5, "k": 5}']
