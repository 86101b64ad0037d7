"""The ``sluice`` command: a thin shell over the library (docs/cli.md).

One module per command group (``queues``, ``messages``, ``jobs``, ``rules``, ``keys``,
``server``, ``dropbox``, ``tail``, ``pipeline``, ``db``, ``demo``), each adding its
commands to the root's parser (``app``); the options every command shares are
``options``, and how output looks is ``output``.
"""

# PYTHON_ARGCOMPLETE_OK  (argcomplete looks for this marker: shell completion, sluice completion)

from __future__ import annotations

from sluice.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
