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


def test_a_newcomer_finds_every_part_and_reads_it_right(
    browser: Any, base: str, db: sluice.Database
) -> None:
    """What issue 39's newcomer met: a red box before logging in, a subscription's waiting
    message shown as Ready 0, a Failed 0 beside a full error queue, a task's deadline as
    1000000000000000.0, an example selector that the console refused, and no way to reach
    the subscriptions, jobs, error queues or rules but the one long page."""
    db.create_topic("news")
    db.subscribe("news", "news.eu")
    db.queue("news").put({"region": "EU"})
    orders = db.create_queue("orders", error_queue="orders.errors")
    orders.put({"total": 120}, properties={"region": "EU"})
    orders.put({"total": 10}, properties={"region": "EU"})
    m = orders.get(where="body.total < 100")
    assert m is not None
    m.reject("card declined")
    db.jobs.define("work")
    db.jobs.submit("nightly", [("work", {"n": 1})])
    db.apply("CREATE QUEUE inbox; CREATE QUEUE copies; "
             "CREATE RULE copy FOR inbox IF true THEN ENQUEUE body INTO copies;")  # fmt: skip
    key = Keys(db).add("root", [], admin=True)
    with sluice.connect("memory://") as elsewhere:
        foreign = Keys(elsewhere).add("root", [], admin=True)

    page = browser.new_page()
    page.set_default_timeout(TIMEOUT)
    page.goto(base + "/")
    page.wait_for_selector("input[name=key]")
    assert page.locator(".error").count() == 0  # nothing went wrong yet
    page.fill("input[name=key]", foreign)  # a key of another database
    page.click("button:has-text('Log in')")
    page.wait_for_selector(".error:has-text('Keys belong to one database')")
    page.fill("input[name=key]", key)
    page.click("button:has-text('Log in')")

    def cell(queue: str, count: str) -> str:
        text: str = page.inner_text(f"tr[data-queue='{queue}'] td[data-count='{count}']")
        return text.strip()

    page.wait_for_selector("tr[data-queue='news.eu']")
    assert cell("news.eu", "ready") == "1"
    assert cell("orders", "failed") == "1"

    # The navigation reaches each part, and each part shows what it is about.
    for label, shown in (
        ("Subscriptions", "tr[data-subscription='news.eu']"),
        ("Jobs", "tr[data-job]"),
        ("Rules", "tr[data-rule='copy']"),
        ("Queues", "tr[data-queue='orders']"),
        ("Error queues", "tr[data-errors='orders.errors']"),
    ):
        page.click(f"header nav a:has-text('{label}')")
        page.wait_for_selector(shown)
        assert page.get_attribute(f"header nav a:has-text('{label}')", "aria-current") == "page"
    # From the error queues to the failed message, which can be sent back from there.
    page.click("tr[data-errors='orders.errors'] a")
    page.wait_for_selector("tr:has-text('card declined') button:has-text('Retry')")

    # The example in the selector box runs as it is.
    page.goto(base + "/console/queues/orders")
    example = page.get_attribute("input[name=where]", "placeholder")
    assert example is not None
    assert "props." in example
    page.fill("input[name=where]", example)
    page.click("button:has-text('Find')")
    page.wait_for_url("**where=*")
    assert page.locator("text=The selector is not valid").count() == 0
    assert page.locator("table.messages tbody tr").count() == 1

    # A task without a deadline says so, in words.
    page.goto(base + "/console/queues/tasks.work")
    row = page.locator("table.messages tbody tr").first.inner_text()
    assert "deadline=none" in row
    assert "1000000000000000" not in page.content()
    page.close()
