"""The declarative rules engine against the same logic written with sluice's Python API.

Run: ``python -m bench rules`` (``--quick`` for a smoke run of seconds, ``--only sqlite`` or
``--only postgresql``). Issue 20's performance targets, on a SQLite file (sluice's default
durability, synchronous=FULL, group commit) and on PostgreSQL (127.0.0.1:5432, database
``test``, a schema ``bench_rules_<case>`` made fresh for every case and dropped after it):

1. Routing (bench/rules/routing.py): the rule ``route`` (one order in, three enqueues out,
   a computed property on the targets) run by ``db.rules.run_until_idle(batch=B)`` on N
   preloaded orders, against a loop ``dequeue(limit=k)``, three ``enqueue``, commit, over the
   same queues and property (the definition without the rule), with k = B and k = 1;
   B = 256 (the engine's default) and 64. Median of ``--repeats`` runs, interleaved.
2. Procurement (bench/rules/procurement.py): Demaq's process from offer requests to offers,
   by the engine and by hand with the join's state kept in a queue (k = B and k = 1).
3. Latency (bench/rules/latency.py): an order's put() to its billing message in the hands of
   a blocked consumer, with the engine running in its background thread; idle system.

On PostgreSQL each case is measured after ``ANALYZE`` of the freshly loaded messages; the
routing pair with k = B = 256 also on the statistics the load left (none yet: a fresh schema
waits for autovacuum's next look), which is what a just-started system meets. The report
ends with a cProfile of the engine's routing run on SQLite (bench/rules/profile.py). Writes
``bench/results/rules-<date>.md`` (``--quick``: the temp directory unless ``--out``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.harness import (
    add_common_options,
    one_line,
    package_versions,
    store_facts,
    write_report,
)
from bench.rules import procurement, routing
from bench.rules.latency import measure
from bench.rules.place import SYSTEMS, Place, fresh
from bench.rules.profile import profile_routing
from bench.rules.report import AsShipped, Procurement, Results, Routing, Timing, render

BATCHES = (256, 64)
ANALYZED = "analyzed"
AS_LOADED = "as loaded"


@dataclass(frozen=True)
class Settings:
    """How much each part measures; per system where the two differ in speed."""

    routing_n: dict[str, int]
    routing_n1: dict[str, int]
    """Orders for the one-message loop (k = 1), which runs a transaction per order."""
    procurement_n: dict[str, int]
    procurement_n1: dict[str, int]
    shipped_n: int
    latency_n: int
    warmup: int
    repeats: int
    profile: bool

    @classmethod
    def full(cls, repeats: int, profile: bool) -> Settings:
        return cls(
            routing_n={"sqlite": 10_000, "postgresql": 5_000},
            routing_n1={"sqlite": 2_000, "postgresql": 600},
            procurement_n={"sqlite": 1_000, "postgresql": 500},
            procurement_n1={"sqlite": 200, "postgresql": 100},
            shipped_n=200,
            latency_n=300,
            warmup=20,
            repeats=repeats,
            profile=profile,
        )

    @classmethod
    def quick(cls) -> Settings:
        both = dict.fromkeys(SYSTEMS, 300)
        return cls(routing_n=both, routing_n1=dict.fromkeys(SYSTEMS, 50),
                   procurement_n=dict.fromkeys(SYSTEMS, 50),
                   procurement_n1=dict.fromkeys(SYSTEMS, 20), shipped_n=20, latency_n=30,
                   warmup=5, repeats=1, profile=True)  # fmt: skip


Log = Callable[[str], None]


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- 1. routing


def _routing_cases(system: str, s: Settings) -> list[Routing]:
    n, n1 = s.routing_n[system], s.routing_n1[system]
    stats = ANALYZED if system == "postgresql" else ""
    cases = [Routing(system, who, b, n, stats) for b in BATCHES for who in ("rules", "hand")]
    cases.append(Routing(system, "hand", 1, n1, stats))
    if system == "postgresql":
        cases += [Routing(system, who, BATCHES[0], n, AS_LOADED) for who in ("rules", "hand")]
    return cases


def _routing_once(case: Routing, tmp_root: Path) -> float:
    with fresh(case.system, "routing", tmp_root) as place:
        place.db.apply(routing.ROUTING if case.contender == "rules" else routing.DEFINITIONS)
        routing.load_orders(place.db, case.n)
        if case.statistics == ANALYZED:
            place.analyze()
        if case.contender == "rules":
            timed = routing.rules(place.db, case.n, case.batch)
        else:
            timed = routing.hand(place.db, case.n, case.batch)
        routing.check_routed(place.db, case.n)
    return timed.seconds


def run_routing(system: str, s: Settings, tmp_root: Path, log: Log) -> list[Routing]:
    """Every routing case, repeats interleaved; the statistics-as-loaded pair runs once."""
    cases = _routing_cases(system, s)
    for rep in range(s.repeats):
        for case in cases:
            if case.error or (case.statistics == AS_LOADED and rep > 0):
                continue
            try:
                case.seconds.append(_routing_once(case, tmp_root))
            except Exception as exc:  # reported in the table; the others go on
                case.error = one_line(exc)
            rate = f"{case.n / case.seconds[-1]:,.0f} msgs/s" if not case.error else case.error
            log(f"routing {system} {case.statistics or ''} {case.contender} {case.batch}"
                f" run {rep + 1}: {rate}")  # fmt: skip
    return cases


# ---------------------------------------------------------------------- 2. procurement


def _procurement_once(case: Procurement, place: Place) -> None:
    db = place.db
    if case.contender == "rules":
        procurement.prepare_by_rules(db, shelter=False)
    else:
        procurement.prepare_by_hand(db)
    procurement.load(db, case.n)
    place.analyze()
    if case.contender == "rules":
        case.phases = procurement.by_rules(db, case.n, case.batch)
    else:
        case.phases = procurement.by_hand(db, case.n, case.batch)
    procurement.check_answered(db, case.n)


def run_procurement(
    system: str, s: Settings, tmp_root: Path, log: Log
) -> tuple[list[Procurement], AsShipped]:
    b, n = BATCHES[0], s.procurement_n[system]
    cases = [
        Procurement(system, "rules", b, n),
        Procurement(system, "hand", b, n),
        Procurement(system, "hand", 1, s.procurement_n1[system]),
    ]
    for case in cases:
        try:
            with fresh(system, "procurement", tmp_root) as place:
                _procurement_once(case, place)
        except Exception as exc:
            case.phases = None
            case.error = one_line(exc)
        rate = f"{case.phases.rate:,.1f} requests/s" if case.phases else case.error
        log(f"procurement {system} {case.contender} {case.batch}: {rate}")
    shipped = AsShipped(system, s.shipped_n)
    shipped.expected_offers = procurement.expected_offers(shipped.n)
    try:
        with fresh(system, "shipped", tmp_root) as place:
            procurement.prepare_by_rules(place.db, shelter=False)
            procurement.load(place.db, shipped.n)
            shipped.answers, shipped.offers = procurement.as_shipped(place.db, shipped.n, b)
    except Exception as exc:
        shipped.error = one_line(exc)
    log(f"procurement {system} as shipped: {shipped.answers} answers of {shipped.n}")
    return cases, shipped


# ---------------------------------------------------------------------- 3. latency


def run_latency(system: str, s: Settings, tmp_root: Path, log: Log) -> list[Timing]:
    out = []
    for direct in (True, False):
        timing = Timing(system)
        try:
            with fresh(system, "latency", tmp_root) as place:
                place.db.apply(routing.ROUTING)
                timing.latency = measure(place.db, n=s.latency_n, warmup=s.warmup,
                                         direct=direct)  # fmt: skip
        except Exception as exc:
            timing.error = one_line(exc)
        summary = timing.latency.summary() if timing.latency else {}
        p50 = f"p50 {summary['p50'] * 1000:.2f} ms" if summary else timing.error
        log(f"latency {system} {'direct' if direct else 'rules'}: {p50}")
        out.append(timing)
    return out


# ---------------------------------------------------------------------- the report


def load_average(when: str) -> tuple[str, str]:
    """The machine's load (1, 5, 15 minutes): other work on its 2 cores moves every figure."""
    one, five, fifteen = os.getloadavg()
    return (f"Load average {when}", f"{one:.2f}, {five:.2f}, {fifteen:.2f}")


def facts(tmp_root: Path, systems: Sequence[str]) -> list[tuple[str, str]]:
    from sluice.rules.engine import BATCH

    rows = store_facts(tmp_root, systems)
    rows += [
        ("Engine batch", f"B = {', '.join(map(str, BATCHES))} (the engine's default: {BATCH})"),
        ("Packages", package_versions(("sluice", "psycopg", "lxml"))),
        load_average("at the start"),
    ]
    return rows


def workload(s: Settings) -> list[str]:
    return [
        "Every case runs in this one process on a database made for it (a new SQLite file, or "
        "a PostgreSQL schema dropped and made again); loading is not timed. After each run "
        "the bench checks the outcome (three routed messages per order with the computed "
        "property; one answer per offer request and the right number of offers).",
        "",
        "- **Routing**: `route` from tests/contract/test_rules.py (orders -> billing, shipping"
        ", audit; `total` computed by `VALUE body.total` on the three targets). *Engine*: "
        "`db.rules.run_until_idle(batch=B)` over N preloaded orders (it also removes the "
        "processed orders at its end, retention 0). *By hand*: the same definition without "
        "the rule, and `with db.transaction() as tx: msgs = tx.dequeue('orders', limit=k)`; "
        "per message the same branch and the same three bodies with `tx.enqueue`; commit; "
        "until the queue is empty (the hand-written messages lack the engine's system "
        "properties: less to write). msgs/s = N / seconds, median of "
        f"{s.repeats} interleaved runs (the PostgreSQL *as loaded* pair: one run).",
        "- **Procurement**: see the docstring of bench/rules/procurement.py for the exact "
        "hand-written method: one loop per department, k messages per transaction; the join "
        "keeps its state in a queue `joinState` with a declared, indexed property "
        "`joinRequest` (browse and dequeue `where=\"joinRequest = '<request>'\"`), finance "
        "browses `overdue` with `where=`, XML with lxml. Customers c0-c9 are overdue "
        "(finance refuses), every 10th request asks for a controlled item (legal refuses). "
        "*Processing* time = both engine (or hand) phases; the bench's supplier, the same "
        "code for both, is timed apart. The engine runs the file as it ships; *as shipped* "
        "checks that an upkeep mid-run loses no answer.",
        "- **Latency**: see the docstring of bench/rules/latency.py; "
        f"{s.latency_n} samples after {s.warmup} of warm-up, gaps of 15-25 ms, engine batch "
        "256, engine, consumer and producer threads in one process. The target is arrival "
        "to actions committed (the engine's `on_batch` right after its commit); put to the "
        "consumer's take adds the consumer's wake-up and dequeue (the *direct* row alone).",
    ]


NOTES = [
    "PostgreSQL *as loaded*: the schema is seconds old and has no statistics (autovacuum "
    "analyzes it within a minute or so); the take keeps the queue's index, but the engine's "
    "INSERT reads and removes the batch's triggers by id (`= ANY(...)`) with sequential "
    "scans of the partition until then (about 1 ms each per batch at 10,000 rows, against "
    "0.1-0.3 ms by the primary key with statistics). One run: noisier than the medians.",
    "An earlier run of this bench found the core engine's removal of done messages deleting "
    "what a live slice held; it now spares them (slice_members), and *as shipped* checks it.",
]


def main(argv: Sequence[str] | None = None) -> int:
    first_line = __doc__.splitlines()[0]
    parser = argparse.ArgumentParser(prog="python -m bench rules", description=first_line)
    add_common_options(
        parser,
        quick="a smoke run of seconds",
        repeats=3,
        repeats_help="routing runs per case (3)",
        tmp_dir=None,
        only=SYSTEMS,
    )
    parser.add_argument("--no-profile", action="store_true", help="leave out the profile")
    args = parser.parse_args(argv)
    tmp_root: Path = args.tmp_dir or Path(tempfile.gettempdir())
    s = Settings.quick() if args.quick else Settings.full(args.repeats, not args.no_profile)
    systems = args.only or list(SYSTEMS)
    res = Results(facts(tmp_root, systems), workload(s), notes=list(NOTES))
    for system in systems:
        res.routing += run_routing(system, s, tmp_root, _log)
    for system in systems:
        cases, shipped = run_procurement(system, s, tmp_root, _log)
        res.procurement += cases
        res.shipped.append(shipped)
    for system in systems:
        res.latency += run_latency(system, s, tmp_root, _log)
    if s.profile and "sqlite" in systems:
        try:
            res.profile = profile_routing(tmp_root, n=s.routing_n["sqlite"])
        except Exception as exc:  # the figures stand without it
            res.profile = f"the profile failed: {one_line(exc)}"
    res.facts.append(load_average("at the end"))
    out = args.out
    if args.quick and out is None:
        out = Path(tempfile.gettempdir()) / "rules-quick.md"
    write_report("rules", render(res), out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
