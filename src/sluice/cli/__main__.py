"""``python -m sluice.cli``: the ``sluice`` command."""

from __future__ import annotations

import sys

from sluice.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
