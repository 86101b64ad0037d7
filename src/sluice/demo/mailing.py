"""The mass-mailing example: a week of a throttled mailer, run in seconds.

A weekly report goes to 10,000 readers as one job of personalised messages; a
profile lets the mail task type send 5 an hour in working hours (Monday to
Friday, 08:00-18:00 in Berlin) and 1,000 an hour at night and at weekends.
The report's deadline passes while it is still being sent; a newsletter job
submitted later must not wait for it, and from then on the two take turns.
Each task puts its mail into an outgoing ``smtp`` gateway queue (``mail.out``), in
the transaction that completes the task, and the gateway sends it through SMTP to a
local sink (aiosmtpd) the example starts, within the same profile (the gateway counts
its own sends); the clock is simulated, moved hour by hour, so the week passes as fast
as the messages can be sent. Needs ``sluice-queue[mail]``.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email.parser import BytesParser
from typing import Any
from zoneinfo import ZoneInfo

import sluice
from sluice.clock import Clock
from sluice.errors import MissingDependency
from sluice.extras import install_hint
from sluice.jobs import ManualClock, Task
from sluice.jobs.profiles import Entry, Profile

__all__ = ["MailingReport", "format_mailing", "run_mailing_demo"]

ZONE = ZoneInfo("Europe/Berlin")
START = datetime(2027, 1, 4, 6, 0, tzinfo=ZONE)  # a Monday, 06:00 in Berlin
WORK_HOURS_PER_HOUR = 5
OFF_HOURS_PER_HOUR = 1000
GATEWAY = "mail.out"


@dataclass
class MailingReport:
    """What was sent, hour by hour, and what the example checked."""

    hours: list[tuple[datetime, int, dict[str, int]]] = field(default_factory=list)
    """(hour, limit in force, messages sent per job) for every hour anything was sent."""
    submitted: dict[str, int] = field(default_factory=dict)
    received: int = 0
    received_twice: int = 0
    gateway_errors: int = 0
    """Mails the smtp gateway could not send (its error queue)."""
    over_limit_hours: int = 0
    finished: dict[str, datetime] = field(default_factory=dict)
    deadline: datetime | None = None
    turns_while_late: int = 0

    @property
    def ok(self) -> bool:
        report, news = "weekly report", "newsletter"
        return (
            self.received == sum(self.submitted.values())
            and self.received_twice == 0
            and self.gateway_errors == 0
            and self.over_limit_hours == 0
            and set(self.finished) == {report, news}
            and self.finished[news] < self.finished[report]
            and self.turns_while_late > 0
        )


class _Sink:
    """An SMTP server's handler that keeps what each message says about itself, and the
    simulated hour it arrived in."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.tasks: Counter[str] = Counter()
        self.sent: Counter[tuple[str, str]] = Counter()  # (hour, job) -> messages

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        message = BytesParser().parsebytes(envelope.content)
        hour = datetime.fromtimestamp(self.clock.now(), ZONE).isoformat()
        with self.lock:
            self.tasks[str(message["X-Sluice-Task"])] += 1
            self.sent[(hour, str(message["X-Sluice-Job"]))] += 1
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_mailing_demo(
    db: sluice.Database, *, readers: int = 10_000, subscribers: int = 2_000, threads: int = 4
) -> MailingReport:
    """Run the week on ``db`` (its clock is set to the simulated one); what went out."""
    try:
        from aiosmtpd.controller import Controller  # noqa: PLC0415
    except ImportError as exc:
        raise MissingDependency(
            f"the mass-mailing example needs aiosmtpd: {install_hint('mail')}"
        ) from exc
    clock = ManualClock(START.timestamp())
    sink = _Sink(clock)
    controller = Controller(sink, hostname="127.0.0.1", port=_free_port())
    controller.start()
    try:
        return _run(db, controller.port, sink, clock, readers=readers,
                    subscribers=subscribers, threads=threads)  # fmt: skip
    finally:
        controller.stop()


def _run(
    db: sluice.Database,
    port: int,
    sink: _Sink,
    clock: ManualClock,
    *,
    readers: int,
    subscribers: int,
    threads: int,
) -> MailingReport:
    db.jobs.clock = clock

    @db.task("mail", max_attempts=5, backoff=60.0)
    def mail(task: Task) -> None:
        to = task.body
        assert isinstance(to, dict)
        # Sent by the gateway once this task completes; never if it fails.
        task.enqueue(GATEWAY, {
            "to": to["address"],
            "subject": f"{to['letter']} for {to['name']}",
            "text": f"Dear {to['name']},\n\nyour {to['letter']} is attached.\n",
            "headers": {"X-Sluice-Task": task.id, "X-Sluice-Job": to["letter"]},
        })  # fmt: skip

    db.jobs.set_profile(
        Profile(
            "mail",
            entries=(
                Entry.parse(
                    "mon-fri", "08:00-18:00", tz=str(ZONE), max_per_hour=WORK_HOURS_PER_HOUR
                ),
            ),
            default_per_hour=OFF_HOURS_PER_HOUR,
            tz=str(ZONE),
        )
    )
    db.create_queue(f"{GATEWAY}.failed")
    db.create_queue(GATEWAY, error_queue=f"{GATEWAY}.failed")
    # The gateway sends within the mail profile too, counting its own sends.
    db.gateways.define(GATEWAY, direction="out", transport="smtp", port=port,
                       sender="reports@example.org", profile="mail")  # fmt: skip
    report = MailingReport(deadline=START.replace(hour=18))

    def letters(name: str, count: int) -> list[tuple[str, dict[str, str]]]:
        return [
            ("mail", {"address": f"reader{n}@example.org", "name": f"Reader {n}", "letter": name})
            for n in range(count)
        ]

    assert report.deadline is not None
    jobs = {"weekly report": db.jobs.submit(
        "weekly report", letters("weekly report", readers), deadline=report.deadline
    )}  # fmt: skip
    report.submitted["weekly report"] = readers
    worker = db.worker(concurrency=threads, batch=10)
    for hour in range(7 * 24):
        now = START + timedelta(hours=hour)
        clock.set(now.timestamp())
        if now == START.replace(hour=12):
            jobs["newsletter"] = db.jobs.submit(
                "newsletter", letters("newsletter", subscribers), deadline=now + timedelta(days=1)
            )
            report.submitted["newsletter"] = subscribers
        runners = [threading.Thread(target=worker.run_until_idle) for _ in range(threads)]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join()
        db.gateways.run_until_idle()  # the hour's mails, through SMTP
        for name, job in jobs.items():
            if name not in report.finished and db.jobs.get(job).ended_at is not None:
                report.finished[name] = now
    report.gateway_errors = db.queue(f"{GATEWAY}.failed").stats()["ready"]
    _tally(report, sink, db)
    return report


def _tally(report: MailingReport, sink: _Sink, db: sluice.Database) -> None:
    profile = db.jobs.profile("mail")
    assert profile is not None
    assert report.deadline is not None
    report.received = sum(sink.tasks.values())
    report.received_twice = sum(1 for n in sink.tasks.values() if n > 1)
    by_hour: dict[str, dict[str, int]] = defaultdict(dict)
    for (sent_at, job), count in sink.sent.items():
        by_hour[sent_at][job] = count
    for key in sorted(by_hour):
        hour = datetime.fromisoformat(key)
        limit = profile.active(hour).max_per_hour or 0
        sent = by_hour[key]
        report.hours.append((hour, limit, sent))
        report.over_limit_hours += sum(sent.values()) > limit
        report.turns_while_late += hour >= report.deadline and len(sent) == 2


def format_mailing(report: MailingReport) -> str:
    lines = [
        "Mass mailing: a week of 'mail' tasks through an smtp gateway, 5/hour Mon-Fri 08-18 "
        "(Berlin), 1,000/hour otherwise",
        f"{'hour (Berlin)':<18} {'limit':>6} {'report':>7} {'newsletter':>10}",
    ]
    rows = report.hours
    i = 0
    while i < len(rows):
        hour, limit, sent = rows[i]
        j = i
        while j + 1 < len(rows) and rows[j + 1][1:] == (limit, sent):
            j += 1  # a run of identical hours is one line
        span = hour.strftime("%a %H:%M") + (f"-{rows[j][0].strftime('%H:%M')}" if j > i else "")
        lines.append(
            f"{span:<18} {limit:>6} {sent.get('weekly report', 0):>7} "
            f"{sent.get('newsletter', 0):>10}" + (f"  (x{j - i + 1} hours)" if j > i else "")
        )
        i = j + 1
    deadline = report.deadline.strftime("%a %H:%M") if report.deadline else "-"
    lines += [
        f"report's deadline {deadline}; finished: "
        + ", ".join(f"{k} {v.strftime('%a %H:%M')}" for k, v in sorted(report.finished.items())),
        f"received by SMTP: {report.received:,} of {sum(report.submitted.values()):,} "
        f"(twice: {report.received_twice}; not sent: {report.gateway_errors}); "
        f"hours over their limit: {report.over_limit_hours}; "
        f"hours the late report shared with the newsletter: {report.turns_while_late}",
        "mass mailing: OK" if report.ok else "mass mailing: FAILED",
    ]
    return "\n".join(lines)
