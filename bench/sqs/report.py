"""The Markdown report of ``bench.sqs``: the rows (``bench.server.report.Row``: rate,
latency, CPU per message), the targets of issue 43 and the ratios."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.server.report import IN_PROCESS, Row, find, ratio, table

__all__ = [
    "HTTP",
    "HTTP_TX",
    "IN_PROCESS",
    "P50_MS",
    "RATIO",
    "SQS",
    "SQS_CANNED",
    "SQS_LEAN",
    "Results",
    "render",
]

RATIO = 0.7
"""SQS against sluice's own HTTP API, the same work: at least this."""
P50_MS = 3.0
"""One durable SendMessage, p50 (1 client): at most this."""

SQS = "SQS (boto3)"
SQS_CANNED = "SQS (boto3), canned answers"
"""boto3 against bench/sqs/floor.py, an endpoint that does no work: boto3's ceiling here."""
SQS_LEAN = "SQS (lean client)"
"""bench/sqs/lean.py: the same requests signed by a few lines over http.client."""
HTTP = "HTTP API"
HTTP_TX = "HTTP API, transaction"


@dataclass
class Results:
    facts: list[tuple[str, str]]
    workload: list[str]
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _fastest(*rows: Row | None) -> Row | None:
    rated = [r for r in rows if r is not None and r.rate is not None]
    return max(rated, key=lambda r: r.rate or 0.0, default=None)


def _ceiling(rows: list[Row], system: str, workload: str, c: int, http: Row | None) -> list[str]:
    """boto3's bound beside a boto3 ratio: boto3 against canned answers, as a share of the
    HTTP API's rate (with 16 clients sharing the cores, the most any endpoint could reach with
    boto3 here), the boto3 row as a share of it, and for one client the serial bound."""
    canned = find(rows, system, SQS_CANNED, workload, c)
    mine = find(rows, system, SQS, workload, c)
    ceiling = ratio("boto3's ceiling (canned answers, no server work) / HTTP", canned, http)
    share = ratio("boto3 on the endpoint / boto3's ceiling", mine, canned)
    out = ["  " + ceiling, "  " + share]
    if c == 1 and canned and http and canned.rate and http.rate:
        # One closed-loop client waits for each answer: its boto3 time and the server's add
        # up, so even a server as fast as the HTTP API's gives at most this.
        serial = 1 / (1 / canned.rate + 1 / http.rate)
        out.append(f"  - the bound of one boto3 client: boto3's own time in series with the "
                   f"HTTP API's, 1 / (1/{canned.rate:,.0f} + 1/{http.rate:,.0f}) = "
                   f"{serial:,.0f} msgs/s, {serial / http.rate:.2f} x HTTP")  # fmt: skip
    return out


def _targets(res: Results, systems: list[str], clients: list[int]) -> list[str]:
    rows, out = res.rows, []
    for system in systems:
        for c in clients:
            w = f"{system}, {c} client(s)"
            send = find(rows, system, HTTP, "send 10", c)
            out.append(ratio(f"{w}: SQS SendMessageBatch(10) / HTTP enqueue of 10",
                              find(rows, system, SQS, "send 10", c), send, RATIO))  # fmt: skip
            out += _ceiling(rows, system, "send 10", c, send)
            out.append(ratio("the endpoint without boto3's CPU: the lean client's / HTTP",
                              find(rows, system, SQS_LEAN, "send 10", c), send,
                              RATIO).replace("- ", "  - ", 1))  # fmt: skip
            http = _fastest(find(rows, system, HTTP, "receive 10 + delete", c),
                            find(rows, system, HTTP_TX, "receive 10 + delete", c))  # fmt: skip
            which = f" ({http.api})" if http else ""
            out.append(ratio(f"{w}: SQS ReceiveMessage(10) + DeleteMessageBatch / the faster "
                              f"HTTP receive of 10{which}",
                              find(rows, system, SQS, "receive 10 + delete", c), http,
                              RATIO))  # fmt: skip
            out += _ceiling(rows, system, "receive 10 + delete", c, http)
            out.append(ratio("the endpoint without boto3's CPU: the lean client's / HTTP",
                              find(rows, system, SQS_LEAN, "receive 10 + delete", c), http,
                              RATIO).replace("- ", "  - ", 1))  # fmt: skip
            out.append(ratio("the same leases: the lean client's / HTTP lease of 10 + acks",
                              find(rows, system, SQS_LEAN, "receive 10 + delete", c),
                              find(rows, system, HTTP, "receive 10 + delete", c),
                              RATIO).replace("- ", "  - ", 1))  # fmt: skip
    for system in systems:
        one = find(rows, system, SQS, "send 1", 1)
        lat = one.latency() if one and not one.error else {}
        if not lat:
            out.append(f"- MISS  {system}: one durable SendMessage, p50: no figure")
            continue
        p50, p99 = lat["p50"] * 1000, lat["p99"] * 1000
        verdict = "PASS" if p50 <= P50_MS else "MISS"
        out.append(f"- {verdict}  {system}: one durable SendMessage (1 client), p50 "
                   f"{p50:.2f} ms, p99 {p99:.2f} ms (need p50 <= {P50_MS:g} ms)")  # fmt: skip
        for label, api in (("the lean client", SQS_LEAN), ("HTTP enqueue of 1", HTTP),
                           ("in-process put", IN_PROCESS)):  # fmt: skip
            row = find(rows, system, api, "send 1", 1)
            other = row.latency() if row and not row.error else {}
            if other:
                out.append(f"  - {label}: p50 {other['p50'] * 1000:.2f} ms, "
                           f"p99 {other['p99'] * 1000:.2f} ms")  # fmt: skip
    return out


def _ratios(res: Results, systems: list[str], clients: list[int]) -> list[str]:
    rows, out = res.rows, []
    for system in systems:
        for c in clients:
            w = f"{system}, {c} client(s)"
            for workload in ("send 10", "receive 10 + delete"):
                out.append(ratio(f"{w}: SQS / in-process, {workload}",
                                  find(rows, system, SQS, workload, c),
                                  find(rows, system, IN_PROCESS, workload, c)))  # fmt: skip
                out.append(ratio(f"{w}: HTTP API / in-process, {workload}",
                                  find(rows, system, HTTP, workload, c),
                                  find(rows, system, IN_PROCESS, workload, c)))  # fmt: skip
        out.append(ratio(f"{system}, 1 client: SQS SendMessage / HTTP enqueue of 1",
                          find(rows, system, SQS, "send 1", 1),
                          find(rows, system, HTTP, "send 1", 1)))  # fmt: skip
    return out


def render(res: Results, systems: list[str], clients: list[int]) -> str:
    """The Markdown report."""
    date = res.facts[0][1][:10] if res.facts else ""
    out = [f"# sluice SQS endpoint benchmark, {date}", "", "## Machine", "", "| | |",
           "|---|---|", *[f"| {k} | {v} |" for k, v in res.facts]]  # fmt: skip
    out += ["", "## Workload", "", *res.workload, "", "## Results", ""]
    titles = {"sqlite": "SQLite file, synchronous=FULL (sluice's default)",
              "postgresql": "PostgreSQL (default durability)"}  # fmt: skip
    for system in systems:
        mine = [r for r in res.rows if r.system == system]
        if mine:
            out += [
                f"### {titles.get(system, system)}",
                "",
                *table(mine, "latency of one operation ({n} requests)"),
                "",
            ]
    out += ["## Targets (issue 43)", "", *_targets(res, systems, clients), ""]
    out += ["## Ratios (msgs/s)", "", *_ratios(res, systems, clients), ""]
    if res.notes:
        out += ["## Analysis and notes", "", *[f"- {n}" for n in res.notes], ""]
    return "\n".join(out)
