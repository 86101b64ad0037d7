"""``sluice keys add``, ``list`` and ``revoke``: the HTTP server's API keys from the
command line (sluice.server.grants)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime

import sluice
from sluice.cli.options import Adder
from sluice.cli.output import when
from sluice.server.grants import ACTIONS, Grant, KeyInfo, Keys
from sluice.server.signing import ENV as SIGNING_ENV
from sluice.server.signing import SigningKey

__all__ = ["add_commands"]


def cmd_add(args: argparse.Namespace, db: sluice.Database) -> int:
    grants = [Grant.parse(text) for text in args.grant]
    signing = SigningKey.load(args.signing_key) if args.signing_key else None
    secret = Keys(db, signing=signing).add(args.name, grants, admin=args.admin)
    # Keys belong to one database: a server started on another refuses this one (401).
    if args.json:
        print(json.dumps({"name": args.name, "secret": secret}))
    else:
        print(secret)
    # On stderr, so that a script can take the secret from stdout alone.
    print(
        f"sluice keys: added the key {args.name!r} to {args.target.describe()} (a server "
        "accepts it when it serves that database); its secret is printed once and cannot "
        "be shown again; keep it now",
        file=sys.stderr,
    )
    return 0


def cmd_list(args: argparse.Namespace, db: sluice.Database) -> int:
    keys = Keys(db).list()
    if args.json:
        # Times as ISO 8601, as every other command's --json writes them.
        times = ("created_at", "used_at", "revoked_at")
        print(json.dumps([k.as_dict() | {t: when(getattr(k, t)) for t in times} for k in keys]))
    else:
        print(_table(keys) if keys else "(no keys)")
    return 0


def cmd_revoke(args: argparse.Namespace, db: sluice.Database) -> int:
    Keys(db).revoke(args.name)
    print(f"revoked the key {args.name!r} in {args.target.describe()}")
    return 0


def _table(keys: list[KeyInfo]) -> str:
    """The keys in aligned columns, a header first."""
    rows = [("NAME", "GRANTS", "CREATED", "USED", "REVOKED")]
    rows += [
        (
            k.name,
            " ".join(["admin"] * k.admin + [str(g) for g in k.grants]),
            _when(k.created_at),
            _when(k.used_at, "never"),
            _when(k.revoked_at, "-"),
        )
        for k in keys
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)), row[-1]])
        for row in rows
    )


def _when(when: float | None, none: str = "") -> str:
    if when is None:
        return none
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def cmd_signing_key(args: argparse.Namespace) -> int:
    SigningKey.generate(args.file)
    print(
        f"sluice keys: wrote a new signing key to {args.file}: give it to `sluice serve "
        f"--signing-key` and `sluice keys add --signing-key` (or ${SIGNING_ENV}); keep it "
        "apart from the database, and never lose it (docs/sqs.md)",
        file=sys.stderr,
    )
    return 0


def add_commands(add: Adder) -> None:
    p = add("keys add", cmd_add, "add an API key and print its secret, once")
    p.add_argument("name", help="the key's name: 1-64 letters, digits and _ . -")
    p.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="PATTERN:ACTIONS",
        help=f"actions ({', '.join(sorted(ACTIONS))}) on the queues a pattern matches, "
        "* any run of characters: 'orders*:produce,consume'; repeatable",
    )
    p.add_argument("--admin", action="store_true", help="the key may do everything")
    p.add_argument(
        "--signing-key", default=os.environ.get(SIGNING_ENV), metavar="FILE",
        help="also keep the secret encrypted under this signing key, so that the key signs "
        f"SQS requests (docs/sqs.md; ${SIGNING_ENV})",
    )  # fmt: skip
    p = add("keys signing-key", cmd_signing_key, "make a new signing key file for the SQS "
            "endpoint (docs/sqs.md)")  # fmt: skip
    p.set_defaults(needs_db=False)
    p.add_argument("file", help="the new file (never overwritten)")
    add("keys list", cmd_list, "list the API keys and their grants (never their secrets)")
    p = add("keys revoke", cmd_revoke, "revoke an API key: requests with it are refused")
    p.add_argument("name", help="the key's name")
