"""The thesis's mailer: python examples/mass_mailing/mailing.py [DATABASE_URL] [--readers=N].

A week of a throttled mailer in seconds (see src/sluice/demo/mailing.py and
docs/jobs.md): one job of 10,000 personalised messages, a profile of 5 an hour
in working hours and 1,000 an hour otherwise, a later job that does not wait for
the first once it is late, every message sent through SMTP to a local sink.
Needs `pip install 'sluice-queue[mail]'`.
"""

from __future__ import annotations

import sys

import sluice
from sluice.demo.mailing import format_mailing, run_mailing_demo


def main(argv: list[str]) -> int:
    url = next((a for a in argv if not a.startswith("--")), "sqlite:///mailing.db")
    readers = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--readers=")), 10_000)
    with sluice.connect(url) as db:
        report = run_mailing_demo(db, readers=readers, subscribers=readers // 5)
    print(format_mailing(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
