"""A short fault campaign on each backend (tests/reliability/campaign.py; `make campaign`
runs a long one), and the checker shown to catch each kind of violation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .campaign import campaign_on, check_stream

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


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_short_campaign_loses_nothing_and_shows_nothing_uncommitted(
    backend: str, tmp_path: Path
) -> None:
    outcome = campaign_on(backend, seed=11, seconds=SECONDS, tmp=tmp_path)
    assert outcome.violations == []
    assert sum(outcome.kills.values()) >= 5  # the faults happened ...
    assert outcome.reported_txs > 100 and outcome.reported_jobs > 5  # ... under load
    assert outcome.checked["out"] >= outcome.reported_txs
