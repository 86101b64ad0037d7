"""The ``sluice`` command's root: its parser, built from every command module, and the
dispatch that opens the database a command needs.

The database comes from ``--db`` or the ``SLUICE_URL`` environment variable (default
``sqlite:///sluice.db``, named on stderr when a command creates it); options go before or
after the command. ``--json`` prints machine-readable output; tables are for people.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import sluice
from sluice import extras
from sluice.cli import (
    db,
    demo,
    dropbox,
    jobs,
    keys,
    messages,
    pipeline,
    queues,
    rules,
    server,
    tail,
)
from sluice.cli.options import Adder, Target, add_global_options, configure_logging, target
from sluice.cli.output import note
from sluice.connect import _split

__all__ = ["build_parser", "main"]

COMMANDS = (demo, db, queues, messages, jobs, rules, keys, server, dropbox, tail, pipeline)
"""Every command module, in the order of ``sluice --help``: each adds its commands."""

GROUPS = {"keys": "the HTTP server's API keys and their grants: add, list, revoke"}
"""Commands that are groups of commands ("sluice keys add"), with their help."""


def _adder(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> Adder:
    """What adds the commands under ``sub``, each with the ``common`` options."""
    groups: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}

    def add(name: str, func: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        # "keys add" is the command add of the group keys (GROUPS).
        group, _, command = name.rpartition(" ")
        under = sub
        if group:
            if group not in groups:
                text = GROUPS[group]
                parent = sub.add_parser(group, parents=[common], help=text, description=text)
                groups[group] = parent.add_subparsers(
                    dest="action", required=True, metavar="ACTION", help="what to do"
                )
            under = groups[group]
        p = under.add_parser(command, parents=[common], help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    return add


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice",
        description="sluice message queues. Options such as --db go before or after the "
        "command; docs/cli.md has them all.",
    )
    parser.add_argument("--version", action="version", version=f"sluice {sluice.__version__}")
    add_global_options(parser, after_command=False)
    common = argparse.ArgumentParser(add_help=False)
    add_global_options(common, after_command=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = _adder(sub, common)
    for module in COMMANDS:
        module.add_commands(add)
    p = add("completion", cmd_completion, "print the shell code that completes sluice's commands")
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="your shell")
    p.set_defaults(needs_db=False)
    return parser


def cmd_completion(args: argparse.Namespace) -> int:
    """``eval "$(sluice completion bash)"`` in ~/.bashrc completes commands and options."""
    # From its module: argcomplete re-exports it typed only since 3.8, and an ignore
    # that one version needs another flags as unused.
    from argcomplete.shell_integration import shellcode  # noqa: PLC0415  (only this command needs it)

    print(shellcode(["sluice"], shell=args.shell))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    _complete(parser)
    args = parser.parse_args(argv)
    try:
        configure_logging(args)
        return _dispatch(args)
    except sluice.QueueNotFound as exc:
        print(f"sluice: error: {exc.describe(_create_hint(exc))}", file=sys.stderr)
        return 2
    except sluice.SluiceError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "demo":
        where = target(args, default=args.db_default)
        args.db, args.target = where.url, where
        return int(args.func(args))
    if args.command == "worker":
        if args.db:
            raise sluice.ConfigurationError(
                f"sluice worker runs on the Database that {args.app} connects to; --db cannot "
                "point it elsewhere: connect to that database in the app (it may read "
                "SLUICE_URL itself)"
            )
        return int(args.func(args))
    where = target(args)
    args.db, args.target = where.url, where
    if getattr(args, "extra", None):  # before the database is opened, or even made
        extras.require(args.extra, f"sluice {args.command}")
    if not getattr(args, "needs_db", True):  # given the URL: it opens no Database itself
        return int(args.func(args))
    # connect's own reading of the URL: it refuses what connect would refuse, the same way.
    scheme, file, _ = _split(where.url)
    new = Path(file) if scheme == "sqlite" and not Path(file).exists() else None
    with sluice.connect(where.url) as db:
        if new is not None:
            _say_new(where, new)
        return int(args.func(args, db))


def _say_new(where: Target, path: Path) -> None:
    """Name the database a command has just created: a typo in ``--db``, or a forgotten
    one, otherwise makes a new empty file where the user's queues are not."""
    how = "no --db or SLUICE_URL given, so " if not where.explicit else ""
    note(f"{how}created a new database {path.resolve()}")


def _create_hint(exc: sluice.QueueNotFound) -> str:
    """How to make what was not found, in the CLI's words."""
    if exc.kind == "topic":
        return f"create it with: sluice create {exc.name} --topic"
    if exc.kind == "subscription":
        return f"subscribe with: sluice subscribe TOPIC {exc.name}"
    return f"create it with: sluice create {exc.name} (sluice queues lists them)"


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (argcomplete), when there is one."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete  # noqa: PLC0415

    argcomplete.autocomplete(parser)
