"""The results of ``bench.server`` and their Markdown report: rates, latencies, CPU per
message, ratios, the targets and where an HTTP enqueue's time goes."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from bench.harness import summarize
from bench.server.clients import Run
from bench.server.profile import Parts

__all__ = [
    "BATCH_RATIO",
    "HTTP",
    "IN_PROCESS",
    "LEAST",
    "P50_MS",
    "Results",
    "Row",
    "find",
    "num",
    "ratio",
    "render",
    "table",
]

BATCH_RATIO = 0.5
"""HTTP enqueue of batches of 10 against the in-process put_many(10): at least this."""
P50_MS = 3.0
"""One durable HTTP enqueue, p50: at most this."""
CONSOLE_MS = 300.0

HTTP = "HTTP"
IN_PROCESS = "in-process"
RABBIT = "RabbitMQ management API"
FLOOR = "Starlette 204 (floor)"
LEAST = "least server"
"""bench/server/least.py: the steps no HTTP enqueue can skip, and nothing else."""


@dataclass
class Row:
    """One workload of one API at one number of clients: its runs, or why there are none."""

    system: str
    api: str
    workload: str
    clients: int
    requests_per_op: int = 1
    runs: list[Run] = field(default_factory=list)
    error: str = ""

    @property
    def rate(self) -> float | None:
        """Messages per second, median of the runs."""
        done = [r.messages / r.seconds for r in self.runs if r.seconds > 0]
        return statistics.median(done) if done and not self.error else None

    @property
    def request_rate(self) -> float | None:
        done = [r.ops * self.requests_per_op / r.seconds for r in self.runs if r.seconds > 0]
        return statistics.median(done) if done and not self.error else None

    def latency(self) -> dict[str, float]:
        return summarize([x for r in self.runs for x in r.latencies])

    def cpu_per_message(self) -> float | None:
        """Microseconds of the serving process's CPU per message moved."""
        cpu = [r.server_cpu for r in self.runs]
        moved = sum(r.messages for r in self.runs)
        if not moved or any(c is None for c in cpu):
            return None
        return sum(c for c in cpu if c is not None) / moved * 1e6

    def client_cpu_per_request(self) -> float:
        requests = sum(r.ops for r in self.runs) * self.requests_per_op
        return sum(r.client_cpu for r in self.runs) / requests * 1e6 if requests else 0.0


@dataclass
class Results:
    facts: list[tuple[str, str]]
    workload: list[str]
    rows: list[Row] = field(default_factory=list)
    parts: dict[str, Parts] = field(default_factory=dict)
    parts_errors: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    console: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    """Per system: the console page's p50 ms served over HTTP, and in Chromium (None:
    no browser figure)."""


def num(value: float | None, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value, fmt)


def table(rows: list[Row], op_note: str = "latency of the {n} requests") -> list[str]:
    """The rows' table; ``op_note``: the note of a row whose operation is several requests."""
    out = [
        "| API | workload | clients | msgs/s | requests/s | p50 ms | p99 ms "
        "| serving CPU us/msg | client CPU us/request | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        head = f"| {r.api} | {r.workload} | {r.clients} "
        if r.error:
            out.append(head + f"| - | - | - | - | - | - | error: {r.error} |")
            continue
        lat = r.latency()
        p50 = lat["p50"] * 1000 if lat else None
        p99 = lat["p99"] * 1000 if lat else None
        notes = []
        if r.requests_per_op > 1:
            notes.append(op_note.format(n=r.requests_per_op))
        if any(run.dry for run in r.runs):
            notes.append("queue ran dry")
        client = "-" if r.api == IN_PROCESS else f"{r.client_cpu_per_request():,.0f}"
        out.append(
            head + f"| {num(r.rate)} | {num(r.request_rate)} | {num(p50, '.2f')} "
            f"| {num(p99, '.2f')} | {num(r.cpu_per_message())} | {client} "
            f"| {'; '.join(notes)} |"
        )
    return out


def find(rows: list[Row], system: str, api: str, workload: str, clients: int) -> Row | None:
    for r in rows:
        if (r.system, r.api, r.workload, r.clients) == (system, api, workload, clients):
            return r
    return None


def ratio(label: str, num: Row | None, den: Row | None, need: float | None = None) -> str:
    a = num.rate if num else None
    b = den.rate if den else None
    if a is None or b is None:
        return f"- {'MISS  ' if need else ''}{label}: no figure"
    text = f"{label}: {a:,.0f} / {b:,.0f} = {a / b:.2f}"
    if need is None:
        return f"- {text}"
    return f"- {'PASS' if a / b >= need else 'MISS'}  {text} (need >= {need:g})"


def _targets(res: Results, systems: list[str], clients: list[int]) -> list[str]:
    rows = res.rows
    out = []
    for system in systems:
        for c in clients:
            mine = find(rows, system, IN_PROCESS, "enqueue 10", c)
            out.append(ratio(
                f"{system}, {c} client(s): HTTP enqueue 10 / in-process put_many(10), msgs/s",
                find(rows, system, HTTP, "enqueue 10", c), mine, BATCH_RATIO))  # fmt: skip
            out.append(
                ratio(
                    "  the bound: the least server's enqueue 10 / in-process put_many(10)",
                    find(rows, system, LEAST, "enqueue 10", c),
                    mine,
                ).replace("- ", "  - ", 1)
            )
    for system in systems:
        one = find(rows, system, HTTP, "enqueue 1", 1)
        lat = one.latency() if one and not one.error else {}
        if not lat:
            out.append(f"- MISS  {system}: one durable HTTP enqueue, p50: no figure")
            continue
        p50 = lat["p50"] * 1000
        verdict = "PASS" if p50 <= P50_MS else "MISS"
        out.append(f"- {verdict}  {system}: one durable HTTP enqueue (1 client), p50 "
                   f"{p50:.2f} ms (need <= {P50_MS:g} ms)")  # fmt: skip
    for system in systems:
        if system not in res.console:
            out.append(f"- NOT MEASURED  {system}: the console page with 100 queues "
                       f"(need <= {CONSOLE_MS:g} ms): see the notes")  # fmt: skip
            continue
        http, browser = res.console[system]
        worst = http if browser is None else max(http, browser)
        seen = f"served p50 {http:.0f} ms" + (
            "" if browser is None else f", Chromium's load event p50 {browser:.0f} ms"
        )
        out.append(f"- {'PASS' if worst <= CONSOLE_MS else 'MISS'}  {system}: the console page "
                   f"with 100 queues, {seen} (need <= {CONSOLE_MS:g} ms)")  # fmt: skip
    return out


def _ratios(res: Results, systems: list[str], clients: list[int]) -> list[str]:
    rows = res.rows
    out = []
    for system in systems:
        for c in clients:
            w = f"{system}, {c} client(s)"
            out += [
                ratio(f"{w}: HTTP enqueue 1 / in-process put", find(rows, system, HTTP,
                       "enqueue 1", c), find(rows, system, IN_PROCESS, "enqueue 1", c)),
                ratio(f"{w}: HTTP lease + ack / in-process get + ack", find(rows, system,
                       HTTP, "lease + ack", c), find(rows, system, IN_PROCESS,
                       "lease + ack", c)),
                ratio(f"{w}: HTTP enqueue 1 / RabbitMQ HTTP publish", find(rows, system,
                       HTTP, "enqueue 1", c), find(rows, "rabbitmq", RABBIT, "enqueue 1", c)),
                ratio(f"{w}: HTTP lease + ack / RabbitMQ HTTP get", find(rows, system, HTTP,
                       "lease + ack", c), find(rows, "rabbitmq", RABBIT, "get + ack", c)),
                ratio(f"{w}: HTTP enqueue 1 / the floor, requests/s", find(rows, system,
                       HTTP, "enqueue 1", c), find(rows, "floor", FLOOR, "http.client", c)),
                ratio(f"{w}: HTTP enqueue 10 / the least server's", find(rows, system, HTTP,
                       "enqueue 10", c), find(rows, system, LEAST, "enqueue 10", c)),
                ratio(f"{w}: HTTP enqueue 1 / the least server's", find(rows, system, HTTP,
                       "enqueue 1", c), find(rows, system, LEAST, "enqueue 1", c)),
            ]  # fmt: skip
    return out


def _parts(res: Results) -> list[str]:
    out: list[str] = []
    for system, parts in res.parts.items():
        one = find(res.rows, system, HTTP, "enqueue 1", 1)
        ten = find(res.rows, system, HTTP, "enqueue 10", 1)
        floor = find(res.rows, "floor", FLOOR, "http.client", 1)
        out += [f"**{system}** (median us of one call, one caller):", "",
                "| part | enqueue 1 | enqueue 10 |", "|---|---:|---:|"]  # fmt: skip

        def p50(row: Row | None) -> float | None:
            lat = row.latency() if row and not row.error else {}
            return lat["p50"] * 1e6 if lat else None

        def line(label: str, a: float | None, b: float | None, out: list[str] = out) -> None:
            out.append(f"| {label} | {num(a)} | {num(b)} |")

        h1, h10 = p50(one), p50(ten)
        line("HTTP request through uvicorn, p50 latency (the table above)", h1, h10)
        line("the app called as ASGI (no socket, no uvicorn)", parts.app[1], parts.app[10])
        line("- the route's transaction (one put_many: one commit)",
             parts.transaction[1], parts.transaction[10])  # fmt: skip
        line("- the body's validation (Enqueue.model_validate_json)",
             parts.validate[1], parts.validate[10])  # fmt: skip
        rest = [parts.app[s] - parts.transaction[s] - parts.validate[s] for s in (1, 10)]
        line("- the rest: routing, the key (remembered), the thread hop, the response",
             rest[0], rest[1])  # fmt: skip
        line("a key's read from the store (Keys.authenticate; once a second per key)",
             parts.authenticate, None)  # fmt: skip
        line("the app as ASGI without keys (auth=False)", parts.app_no_auth[1],
             parts.app_no_auth[10])  # fmt: skip
        gap = [None if h is None else h - parts.app[s] for h, s in ((h1, 1), (h10, 10))]
        line("uvicorn, loopback, client: HTTP p50 - ASGI call", gap[0], gap[1])
        floor_http = p50(floor)
        line("the floor over HTTP, p50 latency (1 client)", floor_http, None)
        line("the floor called as ASGI", parts.floor_app, None)
        line("SHA-256 of the secret alone", parts.sha256, None)
        out.append("")
    for system, error in res.parts_errors.items():
        out += [f"**{system}**: the parts could not be timed: {error}", ""]
    return out


def render(res: Results, systems: list[str], clients: list[int]) -> str:
    """The Markdown report."""
    date = res.facts[0][1][:10] if res.facts else ""
    out = [f"# sluice HTTP server benchmark, {date}", "", "## Machine", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in res.facts]
    out += ["", "## Workload", "", *res.workload, "", "## Results", ""]
    titles = {"sqlite": "SQLite file, synchronous=FULL (sluice's default)",
              "postgresql": "PostgreSQL (default durability)",
              "rabbitmq": "RabbitMQ management API (durable queue, persistent messages)",
              "floor": "The framework's floor: a bare Starlette route answering 204"}  # fmt: skip
    for system in [*systems, "rabbitmq", "floor"]:
        mine = [r for r in res.rows if r.system == system]
        if mine:
            out += [f"### {titles.get(system, system)}", "", *table(mine), ""]
    out += ["## Targets", "", *_targets(res, systems, clients), ""]
    out += ["## Ratios (msgs/s unless said)", "", *_ratios(res, systems, clients), ""]
    if res.parts or res.parts_errors:
        out += ["## Where an HTTP enqueue's time goes", "", *_parts(res)]
    if res.notes:
        out += ["## Analysis and notes", "", *[f"- {n}" for n in res.notes], ""]
    return "\n".join(out)
