"""The options every benchmark shares, declared once: ``--out``, ``--quick``, ``--repeats``,
``--tmp-dir`` and ``--only``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

__all__ = ["add_common_options"]


def add_common_options(
    parser: argparse.ArgumentParser,
    *,
    quick: str | None = None,
    repeats: int | None = None,
    repeats_help: str = "runs per case (median)",
    tmp_dir: Path | bool | None = False,
    only: Sequence[str] | None = None,
    only_help: str = "systems to run (repeatable)",
) -> None:
    """``--out`` always; ``--quick`` with this help when ``quick`` is given; ``--repeats``
    defaulting to ``repeats`` when given; ``--tmp-dir`` (defaulting to ``tmp_dir`` when it is
    a path, else None) unless ``tmp_dir`` is False; ``--only NAME`` (repeatable) among ``only``.
    """
    parser.add_argument("--out", type=Path, help="report path (default: bench/results/...)")
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=quick)
    if repeats is not None:
        parser.add_argument("--repeats", type=int, default=repeats, help=repeats_help)
    if tmp_dir is not False:
        parser.add_argument(
            "--tmp-dir",
            type=Path,
            default=tmp_dir if isinstance(tmp_dir, Path) else None,
            help="where the fresh SQLite files go; must be on disk, not tmpfs",
        )
    if only is not None:
        parser.add_argument(
            "--only", metavar="NAME", action="append", choices=list(only), help=only_help
        )
