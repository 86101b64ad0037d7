"""URLs and options accepted by sluice.connect."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import sluice
from sluice.connect import _split


def test_url_forms() -> None:
    assert _split("sqlite:///q.db") == ("sqlite", "q.db", {})
    assert _split("sqlite:////var/lib/q.db") == ("sqlite", "/var/lib/q.db", {})
    assert _split("q.db") == ("sqlite", "q.db", {})
    assert _split("sqlite:///q.db?synchronous=NORMAL") == (
        "sqlite",
        "q.db",
        {"synchronous": "NORMAL"},
    )
    assert _split("memory://")[0] == "memory"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "non-empty"),
        ("sqlite://host/q.db", "three slashes"),
        ("sqlite:///", "names no file"),
        ("mysql://x/y", "unsupported URL scheme"),
        ("postgresql://localhost/test?schema=Bad-Name", "plain lower-case SQL name"),
        ("postgresql://localhost/test?synchronous=FULL", "are SQLite.s"),
        ("memory://?lease=abc", "number of seconds"),
        ("memory://?colour=blue", "unknown option"),
        ("sqlite:///q.db?synchronous=SOMETIMES", "synchronous must be"),
    ],
)
def test_bad_urls(url: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(sluice.ConfigurationError, match=message):
        sluice.connect(url)


def test_keyword_options_win_over_query(tmp_path: Path) -> None:
    with sluice.connect(f"sqlite:///{tmp_path / 'q.db'}?lease=5", lease=9) as db:
        assert db.lease == 9


@pytest.mark.parametrize(
    ("url", "advice"),
    [
        ("memory:", "use memory://"),
        ("memory", "use memory://"),
        (":memory:", "use memory://"),
        ("sqlite", "a URL has '://'"),
        ("sqlite:/abs.db", "did you mean sqlite:///abs.db (relative) or sqlite:////abs.db"),
        ("sqlite:q.db", "did you mean sqlite:///q.db"),
        ("postgresql:/host/db", "did you mean postgresql://host/db"),
    ],
)
def test_a_mistyped_url_is_refused_not_made_a_file(
    url: str, advice: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(sluice.ConfigurationError, match=re.escape(advice)):
        sluice.connect(url)
    assert list(tmp_path.iterdir()) == []  # no file of that name was made
