"""``sluice demo``: producers and consumers in threads exchange messages in transactions.

Some producer transactions abort, one consumer aborts often, one consumer
process is killed (SIGKILL) while it holds messages. The summary checks, from
the queues themselves, that every committed message was delivered exactly once,
nothing uncommitted ever showed, and a single reader that aborts saw the
messages in commit order. Then the orders example (``orders``) shows
content-aware queuing: typed orders, a priority function and a selective
ordering dequeue; and the mass-mailing example (``mailing``) a week of a
throttled mailer: jobs, a time-of-week profile, late jobs and SMTP; and last Demaq's
procurement process on the rules engine (``procurement``).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import sluice
from sluice import extras
from sluice.demo.mailing import MailingReport, format_mailing, run_mailing_demo
from sluice.demo.orders import OrdersReport, format_orders, run_orders_demo
from sluice.demo.procurement import ProcurementReport, format_procurement, run_procurement_demo

__all__ = ["DemoReport", "run_demo"]

PRODUCERS = 3
TRANSACTIONS = 40
PER_TRANSACTION = 5
ABORT_EVERY = 10  # every 10th producer transaction aborts


@dataclass
class DemoReport:
    """What the demo did and what it verified."""

    url: str
    committed: int = 0
    aborted_producer_transactions: int = 0
    consumer_aborts: int = 0
    killed_consumer_held: int = 0
    recovered_sessions: list[int] = field(default_factory=list)
    delivered: int = 0
    delivered_twice: int = 0
    never_delivered: int = 0
    uncommitted_seen: int = 0
    ordered_reader_aborts: int = 0
    ordered_reader_in_commit_order: bool = False
    error_queue: int = 0
    orders: OrdersReport = field(default_factory=OrdersReport)
    mailing: MailingReport = field(default_factory=MailingReport)
    procurement: ProcurementReport = field(default_factory=ProcurementReport)

    @property
    def ok(self) -> bool:
        return (
            self.orders.ok
            and self.mailing.ok
            and self.procurement.ok
            and self.delivered == self.committed
            and not (self.delivered_twice or self.never_delivered or self.uncommitted_seen)
            and self.ordered_reader_in_commit_order
            and self.killed_consumer_held > 0
            and len(self.recovered_sessions) == 1
        )


def run_demo(url: str, *, readers: int | None = None) -> DemoReport:
    """Run the whole demo against a fresh database at ``url``.

    ``readers``: the mass mailing's weekly report goes to this many (10,000).
    """
    # Checked before anything is stored: the mailing needs an SMTP sink, the procurement
    # example's messages are XML.
    extras.require("mail", "the demo's mass-mailing example")
    extras.require("xml", "the demo's procurement example (XML messages)")
    with sluice.connect(url) as db:
        if db.queues():
            raise sluice.SluiceError(
                f"the demo needs a fresh database, and {url} has queues; remove it or pick another"
            )
        return _Demo(db, url, readers or 10_000).run()


class _Demo:
    """The demo's threads and the record they keep of what really committed."""

    def __init__(self, db: sluice.Database, url: str, readers: int) -> None:
        self.db = db
        self.url = url
        self.readers = readers
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.commit_order: list[tuple[int, int]] = []
        self.seen_in_order: list[tuple[int, int]] = []
        self.aborts = Counter[str]()

    def run(self) -> DemoReport:
        db = self.db
        db.create_queue("orders", max_attempts=5, error_queue="orders.errors")
        db.create_queue("audit")
        db.create_queue("receipts")
        report = DemoReport(url=self.url)
        # Some work first, so the consumer process we kill has messages to hold.
        self.produce(0)
        report.killed_consumer_held = _kill_a_consumer(self.url)
        report.recovered_sessions = db.recover()

        producers = [threading.Thread(target=self.produce, args=(p,)) for p in range(1, PRODUCERS)]
        consumers = [
            threading.Thread(target=self.consume, args=("steady-1", 0.0, 1)),
            threading.Thread(target=self.consume, args=("steady-2", 0.0, 2)),
            threading.Thread(target=self.consume, args=("aborting", 0.3, 3)),
            threading.Thread(target=self.ordered_reader),
        ]
        for th in producers + consumers:
            th.start()
        for th in producers:
            th.join()
        self.done.set()
        for th in consumers:
            th.join()
        self.summarise(report)
        report.orders = run_orders_demo(db)
        report.mailing = run_mailing_demo(db, readers=self.readers, subscribers=self.readers // 5)
        # Last: it moves the database's clock a month ahead.
        report.procurement = run_procurement_demo(db)
        return report

    def produce(self, p: int) -> None:
        for t in range(TRANSACTIONS):
            committed = t % ABORT_EVERY != ABORT_EVERY - 1
            with self.db.transaction() as tx:
                batch = [(p, t * PER_TRANSACTION + i) for i in range(PER_TRANSACTION)]
                for producer, seq in batch:
                    body = {"producer": producer, "seq": seq, "committed": committed}
                    tx.enqueue("orders", body)
                    tx.enqueue("audit", body)
                if not committed:
                    tx.abort()
                    continue
                with self.lock:  # the lock orders our record the same way as the commits
                    tx.commit()
                    self.commit_order.extend(batch)

    def consume(self, name: str, abort_rate: float, seed: int) -> None:
        rng = random.Random(seed)  # noqa: S311 - a simulation, not cryptography
        while True:
            with self.db.transaction() as tx:
                taken = tx.dequeue("orders", limit=rng.randint(1, 4), wait=0.05)
                if not taken:
                    if self.done.is_set():
                        return
                    continue
                for m in taken:
                    tx.enqueue("receipts", m.body)
                if rng.random() < abort_rate:
                    tx.abort()
                    with self.lock:
                        self.aborts[name] += 1

    def ordered_reader(self) -> None:
        n = 0
        while True:
            with self.db.transaction() as tx:
                taken = tx.dequeue("audit", limit=7, wait=0.05)
                if not taken:
                    if self.done.is_set():
                        return
                    continue
                n += 1
                if n % 3 == 0:
                    tx.abort()
                    self.aborts["ordered"] += 1
                    continue
            self.seen_in_order.extend((m.body["producer"], m.body["seq"]) for m in taken)

    def summarise(self, report: DemoReport) -> None:
        receipts = _drain(self.db, "receipts")
        committed = set(self.commit_order)
        counts = Counter((r["producer"], r["seq"]) for r in receipts)
        report.committed = len(self.commit_order)
        report.aborted_producer_transactions = PRODUCERS * (TRANSACTIONS // ABORT_EVERY)
        report.consumer_aborts = self.aborts["aborting"]
        report.ordered_reader_aborts = self.aborts["ordered"]
        report.delivered = len(counts)
        report.delivered_twice = sum(1 for n in counts.values() if n > 1)
        report.never_delivered = len(committed - set(counts))
        report.uncommitted_seen = sum(1 for key in counts if key not in committed) + sum(
            1 for key in self.seen_in_order if key not in committed
        )
        report.ordered_reader_in_commit_order = self.seen_in_order == self.commit_order
        report.error_queue = self.db.queue("orders.errors").stats()["ready"]


def _drain(db: sluice.Database, queue: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        with db.transaction() as tx:
            taken = tx.dequeue(queue, limit=500)
            out.extend(m.body for m in taken)
        if not taken:
            return out


def _kill_a_consumer(url: str) -> int:
    with subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
        [sys.executable, "-m", "sluice.demo", "victim", url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as victim:
        assert victim.stdout is not None
        held = int(victim.stdout.readline() or 0)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        return held


def _victim(url: str) -> None:
    db = sluice.connect(url)
    tx = db.begin()
    taken = tx.dequeue("orders", limit=5, wait=5)
    tx.enqueue("receipts", {"producer": -1, "seq": -1, "committed": False})
    tx.browse("receipts")  # written as pending: the kill must make it vanish
    print(len(taken), flush=True)
    sys.stdin.readline()  # killed while waiting here


def format_report(report: DemoReport) -> str:
    check = {True: "ok", False: "FAILED"}
    lines = [
        f"sluice demo on {report.url}",
        f"  producers: {PRODUCERS} threads, {report.committed} messages committed, "
        f"{report.aborted_producer_transactions} transactions aborted",
        f"  consumers: 3 threads + 1 process; {report.consumer_aborts} consumer aborts",
        f"  killed consumer held {report.killed_consumer_held} messages; "
        f"sessions rolled back: {report.recovered_sessions}",
        f"  delivered exactly once: {report.delivered}/{report.committed} "
        f"(twice: {report.delivered_twice}, missing: {report.never_delivered})  "
        f"{check[report.delivered == report.committed and not report.delivered_twice]}",
        f"  uncommitted messages seen: {report.uncommitted_seen}  "
        f"{check[report.uncommitted_seen == 0]}",
        f"  single reader with {report.ordered_reader_aborts} aborts saw commit order: "
        f"{check[report.ordered_reader_in_commit_order]}",
        format_orders(report.orders),
        format_mailing(report.mailing),
        format_procurement(report.procurement),
        f"  result: {'all checks passed' if report.ok else 'CHECKS FAILED'}",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``python -m sluice.demo [URL] [--readers N] [--json]`` (``sluice demo`` calls it)."""
    if argv[:1] == ["victim"]:  # the consumer process the demo kills (_kill_a_consumer)
        _victim(argv[1])
        return 0
    parser = argparse.ArgumentParser(prog="python -m sluice.demo", description=__doc__)
    parser.add_argument("url", nargs="?", default="sqlite:///sluice-demo.db",
                        help="a fresh database (default sqlite:///sluice-demo.db)")  # fmt: skip
    parser.add_argument("--readers", type=int, help="recipients of the mailing's report")
    parser.add_argument("--json", action="store_true", help="the report as JSON")
    args = parser.parse_args(argv)
    report = run_demo(args.url, readers=args.readers)
    if args.json:
        print(json.dumps(asdict(report) | {"ok": report.ok}, default=str))
    else:
        print(format_report(report))
    return 0 if report.ok else 1
