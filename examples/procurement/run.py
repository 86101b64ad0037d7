"""Demaq's procurement process: python examples/procurement/run.py [DATABASE_URL].

The application is src/sluice/demo/procurement.rules (docs/rules.md), which the
package ships; this script plays the customers, the supplier and a month of time on a
manual clock (see src/sluice/demo/procurement.py) and prints what the customers received,
what the administrators were told and what retention removed.
"""

from __future__ import annotations

import sys

import sluice
from sluice.demo.procurement import format_procurement, run_procurement_demo


def main(argv: list[str]) -> int:
    url = argv[0] if argv else "memory://"
    with sluice.connect(url) as db:
        report = run_procurement_demo(db)
    print(format_procurement(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
