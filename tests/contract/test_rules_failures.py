"""A rule that raises anything at all while it processes a message, sluice's error or
not, makes an error message of it (docs/rules.md, "Errors as messages") instead of
leaving the message ready for the engine to stop at again; the engine counts it where a
timer can read it (``db.rules.stats``) and logs it."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pydantic
import pytest

import sluice

ROUTE = """
CREATE QUEUE inbox ERRORQUEUE inboxErrors;
CREATE QUEUE inboxErrors;
CREATE QUEUE orders TYPE Order;
CREATE RULE take FOR inbox IF true THEN ENQUEUE json_object('n', body.n) INTO orders;
"""


class Order(pydantic.BaseModel):
    """A model whose validator calls out (a stock service, say) and can raise anything."""

    n: int

    @pydantic.field_validator("n")
    @classmethod
    def in_stock(cls, n: int) -> int:
        if n == 2:
            raise LookupError("the stock service does not know item 2")
        return n


def test_a_rule_that_raises_anything_makes_an_error_message(
    db: sluice.Database, caplog: pytest.LogCaptureFixture
) -> None:
    db.create_type(model=Order)  # bound here: the engine checks what it enqueues
    db.apply(ROUTE)
    db.queue("inbox").put_many([{"n": 1}, {"n": 2}, {"n": 3}])
    with caplog.at_level(logging.WARNING, logger="sluice.rules"):
        stats = db.rules.run_until_idle()
    assert (stats.processed, stats.errors) == (3, 1)
    assert db.rules.stats is stats
    assert [m.body.n for m in db.queue("orders").browse()] == [1, 3]  # as bound Orders
    assert db.queue("inbox").browse() == []  # none left ready to fail again
    (error,) = [m.body for m in db.queue("inboxErrors").browse()]
    assert error["error"] == "evaluation"
    assert error["rule"] == "take"
    assert error["message"] == "LookupError: the stock service does not know item 2"
    assert error["trigger"]["body"] == {"n": 2}
    (record,) = [r for r in caplog.records if r.name == "sluice.rules"]
    assert record.levelname == "WARNING"
    assert "error message in 'inboxErrors'" in record.getMessage()
    assert "in in_stock" in caplog.text  # the traceback of what was not sluice's own


def test_the_running_engine_goes_on_past_such_a_message_and_counts_it(
    db: sluice.Database,
) -> None:
    db.create_type(model=Order)
    db.apply(ROUTE)
    db.queue("inbox").put_many([{"n": 2}, {"n": 3}])
    done = threading.Event()

    def on_batch(queue: str, result: Any) -> None:
        if db.rules.stats.processed == 2:  # the counts a progress timer reads
            done.set()

    db.rules.start(on_batch=on_batch)
    try:
        assert done.wait(60)
    finally:
        db.rules.stop()
    assert (db.rules.stats.processed, db.rules.stats.errors) == (2, 1)
    assert [m.body.n for m in db.queue("orders").browse()] == [3]
