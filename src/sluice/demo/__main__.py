"""``python -m sluice.demo [URL] [--json] [--readers=N]``: the demo (see the package)."""

from __future__ import annotations

import sys

from sluice.demo.exchange import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
