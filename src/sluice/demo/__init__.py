"""``sluice demo``: what sluice does, shown and checked on a real database.

``exchange`` runs producers and consumers in transactions (aborts, a killed consumer)
and then the three examples: ``orders`` (content-aware queuing), ``mailing`` (a week
of a throttled mailer: jobs and profiles) and ``procurement`` (Demaq's process on the
rules engine; its application is ``procurement.rules``, package data here, which
``examples/procurement/`` runs too). ``python -m sluice.demo [URL]`` runs it all.
"""

from __future__ import annotations

from sluice.demo.exchange import DemoReport, main, run_demo

__all__ = ["DemoReport", "main", "run_demo"]
