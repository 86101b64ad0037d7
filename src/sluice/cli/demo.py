"""``sluice demo``: the demo (sluice.demo) on a fresh database."""

from __future__ import annotations

import argparse

from sluice.cli.options import Adder

__all__ = ["add_commands"]


def cmd_demo(args: argparse.Namespace) -> int:
    # Imported here: the demo loads the rules engine, which no other command needs.
    from sluice import demo  # noqa: PLC0415

    url = args.db if "://" in args.db else f"sqlite:///{args.db}"
    argv = [url, f"--readers={args.readers}"]
    return demo.main([*argv, "--json"] if args.json else argv)


def add_commands(add: Adder) -> None:
    p = add("demo", cmd_demo, "run the transactional producer/consumer demo on a fresh database")
    p.add_argument(
        "--readers", type=int, default=10_000, help="recipients of the mass mailing's report"
    )
    p.set_defaults(needs_db=False, db_default="sluice-demo.db")
