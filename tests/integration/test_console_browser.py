"""The web console as a user meets it: headless Chromium (Debian's ``chromium``, driven by
Playwright) against a real uvicorn server over a SQLite file. Open the console, log in
with a key, find a message with a selector, retry a failed one, pause a queue, see the
chart move.

Without chromium (or Playwright) the test is skipped locally and fails in CI, as the
PostgreSQL tests are.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice.server.grants import Grant, Keys

uvicorn = pytest.importorskip("uvicorn")

from sluice.server.app import create_app  # noqa: E402
from tests.live_server import serve  # noqa: E402

TIMEOUT = 15_000
"""Milliseconds a page condition may take (the console polls every 2 s)."""


def unavailable(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium from the system's chromium package."""
    executable = shutil.which("chromium")
    if executable is None:
        unavailable("no chromium on PATH: apt-get install chromium (make test does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        unavailable(f"Playwright is not installed ({exc}): pip install -e '.[dev]'")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sluice.Database]:
    database = sluice.connect(f"sqlite:///{tmp_path / 'queues.db'}")
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def base(db: sluice.Database) -> Iterator[str]:
    """A real server over ``db``, in a thread of this process."""
    with serve(create_app(db, sample_every=0.2, sample_duty=1.0)) as url:
        yield url


def test_a_user_finds_retries_pauses_and_watches(
    browser: Any, base: str, db: sluice.Database, tmp_path: Path
) -> None:
    db.create_queue("orders", error_queue="orders.errors")
    orders = db.queue("orders")
    orders.put_many([{"customer": c, "total": t} for c, t in
                     (("jones", 80), ("smith", 120), ("brown", 40))])  # fmt: skip
    orders.put_many([{"customer": "failing", "n": n} for n in range(2)])
    for _ in range(3):  # the three orders go round once
        m = orders.get()
        assert m is not None
        m.release()
    for n in range(2):
        m = orders.get(where="body.customer = 'failing'")
        assert m is not None
        m.reject(f"card declined {n}")
    key = Keys(db).add("ops", [Grant.parse("orders*:produce,consume,browse,manage")])

    page = browser.new_page()
    page.set_default_timeout(TIMEOUT)
    # Open the console: no key yet, so the login form.
    page.goto(base + "/")
    page.fill("input[name=key]", key)
    page.click("button:has-text('Log in')")
    page.wait_for_selector("tr[data-queue='orders']")
    assert page.inner_text("tr[data-queue='orders.errors'] td:nth-child(3)") == "2"

    # Find a message with a selector.
    page.click("tr[data-queue='orders'] a")
    page.fill("input[name=where]", "body.customer = 'smith' AND body.total > 100")
    page.click("button:has-text('Find')")
    page.wait_for_url("**where=*")
    rows = page.locator("table.messages tbody tr")
    assert rows.count() == 1
    assert "smith" in rows.first.inner_text()

    # A selector that does not parse is said in the page.
    page.fill("input[name=where]", "body.total >")
    page.click("button:has-text('Find')")
    page.wait_for_selector("text=The selector is not valid")

    # Retry a failed message from the error queue: back to orders.
    page.goto(base + "/console/queues/orders.errors")
    failed = page.locator("tr", has_text="card declined 1")
    failed.locator("button:has-text('Retry')").click()
    page.wait_for_selector("text=Retried 1 message back to orders.")
    assert page.locator("tr", has_text="card declined 1").count() == 0
    assert any(m.body == {"customer": "failing", "n": 1} for m in orders.browse())

    # Pause the queue: consumers (here, this process) get nothing; resume it.
    page.goto(base + "/console/queues/orders")
    page.click("#live button:has-text('Pause')")
    page.wait_for_selector("#live .badge.paused")
    assert db.queue("orders").paused
    assert orders.get() is None
    page.click("#live button:has-text('Resume')")
    page.wait_for_selector("#live button:has-text('Pause')")
    assert not db.queue("orders").paused

    # The chart moves: enqueue, and the page (polling) shows the new depth.
    depth = "svg.chart >> nth=0"
    page.wait_for_function("document.querySelector('svg.chart').dataset.latest === '4'")
    orders.put_many([{"customer": "new", "n": n} for n in range(6)])
    page.wait_for_function("document.querySelector('svg.chart').dataset.latest === '10'")
    assert int(page.get_attribute(depth, "data-points") or 0) >= 2

    shot = Path(os.environ.get("SLUICE_SCREENSHOTS", tmp_path)) / "console-queue.png"
    page.screenshot(path=str(shot), full_page=True)
    page.goto(base + "/")
    page.screenshot(path=str(shot.with_name("console-dashboard.png")), full_page=True)
    page.close()
