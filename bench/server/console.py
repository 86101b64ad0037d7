"""The console's page load with 100 queues (target: <= 300 ms): ``GET /`` of a real
``sluice serve`` timed by an HTTP client, and the page's load event in headless Chromium
(Debian's ``chromium`` through Playwright) where it is installed.

Run alone: ``python -m bench server --console-only`` (``--only sqlite`` or ``postgresql``).
"""

from __future__ import annotations

import http.client
import shutil
import statistics
import time
from dataclasses import dataclass

import sluice
from bench.harness import percentile
from bench.server.procs import sluice_serve

QUEUES = 100
LOADS = 30
"""Page loads timed per figure (after 3 untimed)."""


@dataclass(frozen=True)
class ConsoleLoad:
    system: str
    http_p50_ms: float
    http_p95_ms: float
    browser_p50_ms: float | None
    """The load event in Chromium (navigation start to loadEventEnd); None without it."""
    browser_note: str = ""

    def line(self) -> str:
        browser = (
            f"Chromium load event p50 {self.browser_p50_ms:.0f} ms"
            if self.browser_p50_ms is not None
            else f"no browser figure ({self.browser_note})"
        )
        return (
            f"**Console page, {self.system}**: `GET /` with {QUEUES} queues (each with "
            f"messages, an error queue every tenth), admin key: p50 {self.http_p50_ms:.0f} ms, "
            f"p95 {self.http_p95_ms:.0f} ms over {LOADS} loads (target <= 300 ms); {browser}."
        )


def populate(db: sluice.Database) -> str:
    """100 queues with messages, some failed; returns an admin key."""
    from sluice.server.grants import Keys

    for n in range(QUEUES):
        errors = f"q{n:03d}.errors" if n % 10 == 0 else None
        q = db.create_queue(f"q{n:03d}", error_queue=errors, exist_ok=True)
        q.put_many([{"n": i, "queue": n} for i in range(20)])
        if errors is not None:
            for _ in range(3):
                m = q.get()
                assert m is not None
                m.reject("bench")
    return Keys(db).add("console-bench", [], admin=True)


def measure_console(system: str, url: str) -> ConsoleLoad:
    with sluice.connect(url) as db:
        secret = populate(db)
    with sluice_serve(url) as server:
        times = _http_loads(server.port, secret)
        browser, note = _browser_loads(server.port, secret)
    return ConsoleLoad(
        system,
        statistics.median(times) * 1000,
        percentile(times, 95) * 1000,
        None if browser is None else statistics.median(browser),
        note,
    )


def _http_loads(port: int, secret: str) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {secret}"}
    times = []
    for i in range(LOADS + 3):
        started = time.perf_counter()
        conn.request("GET", "/", headers=headers)
        answer = conn.getresponse()
        body = answer.read()
        elapsed = time.perf_counter() - started
        if answer.status != 200 or b'data-queue="q099"' not in body:
            raise RuntimeError(f"the console answered {answer.status}: {body[:200]!r}")
        if i >= 3:
            times.append(elapsed)
    conn.close()
    return times


def _browser_loads(port: int, secret: str) -> tuple[list[float] | None, str]:
    executable = shutil.which("chromium")
    if executable is None:
        return None, "no chromium installed"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None, "Playwright not installed"
    base = f"http://127.0.0.1:{port}"
    loads = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable)
        page = browser.new_page()
        page.goto(base + "/console/login")
        page.fill("input[name=key]", secret)
        page.click("button[type=submit]")
        page.wait_for_selector("tr[data-queue='q099']")
        for i in range(LOADS + 3):
            page.goto(base + "/", wait_until="load")
            page.wait_for_function("performance.getEntriesByType('navigation')[0].loadEventEnd > 0")
            took = page.evaluate(
                "(() => { const n = performance.getEntriesByType('navigation')[0];"
                " return n.loadEventEnd - n.startTime; })()"
            )
            if i >= 3:
                loads.append(float(took))
        browser.close()
    return loads, ""
