"""What the server reads and says as it starts (sluice.server.startup): one environment
variable for the database, ``SLUICE_URL`` as for the CLI (the factory read
``SLUICE_DB``), and a warning when no key could use the database it serves."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import sluice

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from sluice.errors import ConfigurationError
from sluice.server.app import from_environment
from sluice.server.grants import Keys
from sluice.server.startup import database_url, no_key_warning, shown_url


@pytest.fixture
def url(tmp_path: Path) -> str:
    made = f"sqlite:///{tmp_path / 'served.db'}"
    with sluice.connect(made) as db:
        db.create_queue("orders")
    return made


def served_queues(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("SLUICE_NO_AUTH", "1")
    app = from_environment()
    try:
        with TestClient(app) as http:
            return [q["name"] for q in http.get("/api/queues").json()]
    finally:
        app.state.db.close()


def test_the_factory_reads_sluice_url_as_the_cli_does(
    monkeypatch: pytest.MonkeyPatch, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("SLUICE_DB", raising=False)
    monkeypatch.setenv("SLUICE_URL", url)
    assert served_queues(monkeypatch) == ["orders"]
    assert "deprecated" not in caplog.text


def test_sluice_db_still_works_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("SLUICE_URL", raising=False)
    monkeypatch.setenv("SLUICE_DB", url)
    with caplog.at_level(logging.WARNING, "sluice.server"):
        assert served_queues(monkeypatch) == ["orders"]
    assert "SLUICE_DB is deprecated" in caplog.text
    assert "SLUICE_URL" in caplog.text


def test_both_naming_one_database_is_no_error_and_two_is(url: str) -> None:
    assert database_url({"SLUICE_URL": url, "SLUICE_DB": url}) == url
    other = "postgresql://app:s3cret@db.example:5432/queues"
    with pytest.raises(ConfigurationError, match="SLUICE_URL and SLUICE_DB name different") as e:
        database_url({"SLUICE_URL": url, "SLUICE_DB": other})
    assert "s3cret" not in str(e.value)  # the URL is shown, its password not
    with pytest.raises(ConfigurationError, match="SLUICE_URL must name the database"):
        database_url({})


def test_a_password_is_never_shown() -> None:
    assert shown_url("postgresql://app:s3cret@db:5432/q?schema=x") == (
        "postgresql://app:***@db:5432/q?schema=x"
    )
    assert shown_url("postgresql://[::1]/q") == "postgresql://[::1]/q"
    assert shown_url("postgresql://app:pw@[::1]:5433/q") == "postgresql://app:***@[::1]:5433/q"
    assert shown_url("sqlite:///queues.db") == "sqlite:///queues.db"


def test_a_database_without_keys_is_warned_of_with_how_to_add_one(
    monkeypatch: pytest.MonkeyPatch, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("SLUICE_DB", raising=False)
    monkeypatch.delenv("SLUICE_NO_AUTH", raising=False)
    monkeypatch.setenv("SLUICE_URL", url)
    with caplog.at_level(logging.WARNING, "sluice.server"):
        from_environment().state.db.close()
    assert no_key_warning(url) in caplog.text
    assert f"sluice keys add NAME --admin --db {url}" in caplog.text
    # A key, even one revoked since, is no longer "none at all"; all revoked still is.
    with sluice.connect(url) as db:
        Keys(db).add("ops", [], admin=True)
    caplog.clear()
    from_environment().state.db.close()
    assert "has no API key" not in caplog.text
    with sluice.connect(url) as db:
        Keys(db).revoke("ops")
    from_environment().state.db.close()
    assert "has no API key" in caplog.text
