"""Celery and kombu on sluice: the kombu transport behind ``sluice+…`` broker URLs.

``import sluice.contrib.kombu`` registers the transport with kombu under the name
``sluice``, so ``kombu.Connection("sluice+sqlite:///celery.db")`` and Celery's
``broker_url = "sluice+postgresql://host/db"`` reach sluice queues
(docs/celery.md). Needs the ``celery`` extra (kombu).
"""

from __future__ import annotations

from sluice.extras import load

load("kombu.transport", "celery", "sluice's kombu transport (sluice.contrib.kombu)")

from kombu.transport import TRANSPORT_ALIASES  # noqa: E402  (after the check above)

from sluice.contrib.kombu.names import from_sluice, to_sluice  # noqa: E402
from sluice.contrib.kombu.transport import Transport, close_databases  # noqa: E402

__all__ = ["Transport", "close_databases", "from_sluice", "to_sluice"]

TRANSPORT_ALIASES.setdefault("sluice", "sluice.contrib.kombu:Transport")
