"""``sluice serve``: the HTTP API on uvicorn (docs/server.md)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys

import sluice
from sluice.cli.options import Adder
from sluice.errors import ConfigurationError, MissingDependency
from sluice.extras import install_hint

__all__ = ["add_commands", "loopback"]


def loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def cmd_serve(args: argparse.Namespace, db: sluice.Database) -> int:
    try:
        import uvicorn  # noqa: PLC0415  (sluice-queue[server], an extra)

        from sluice.server.app import create_app  # noqa: PLC0415  (needs the extra)
        from sluice.server.headers import with_header_timeout  # noqa: PLC0415
        from sluice.server.startup import keyless, no_key_warning  # noqa: PLC0415
    except ImportError as exc:
        raise MissingDependency(
            f"the server needs its extra ({exc}): {install_hint('server')}"
        ) from None
    if args.no_auth:
        if not loopback(args.host):
            raise ConfigurationError(
                f"--no-auth serves only on loopback (127.0.0.1, ::1, localhost), not "
                f"{args.host!r}: make a key with `sluice keys add` instead"
            )
        print(
            "sluice serve: WARNING: --no-auth: every request may do everything, with no key asked",
            file=sys.stderr,
            flush=True,
        )
    elif keyless(db):  # it would refuse every request, and say only "401" to each
        print(f"sluice serve: WARNING: {no_key_warning(args.db)}", file=sys.stderr, flush=True)
    # Given only when asked for: the server's own default (BODY_TIMEOUT) otherwise.
    timeouts = {} if args.body_timeout is None else {"body_timeout": args.body_timeout}
    signing = None
    if args.signing_key:
        from sluice.server.signing import SigningKey  # noqa: PLC0415  (needs the extra)

        signing = SigningKey.load(args.signing_key)
    app = create_app(db, auth=not args.no_auth, max_request=args.max_request,
                     idempotency_stale=args.idempotency_stale, signing=signing,
                     moto_tests=args.moto_tests, **timeouts)  # fmt: skip
    # TLS, workers behind a proxy and the rest: uvicorn's own options (docs/server.md).
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        # The command's own level (--log-level, -v, -q: sluice.cli.options) for uvicorn too.
        log_level=logging.getLevelName(logging.getLogger("sluice").getEffectiveLevel()).lower(),
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        limit_concurrency=args.limit_concurrency,
        http=with_header_timeout(args.header_timeout),  # uvicorn has none of its own
    )
    return 0


def add_commands(add: Adder) -> None:
    p = add("serve", cmd_serve, "serve the HTTP API (sluice-queue[server]; docs/server.md)")
    p.set_defaults(extra="server")  # checked before the database is opened (sluice.cli.app)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (8080)")
    p.add_argument(
        "--no-auth", action="store_true", help="no API keys asked (loopback only; for trying)"
    )
    p.add_argument(
        "--max-request", type=int, default=16 * 1024 * 1024, help="largest request body, bytes"
    )
    p.add_argument(
        "--body-timeout", type=float, default=None,
        help="seconds a request's body may take to arrive, 408 beyond (60)",
    )  # fmt: skip
    p.add_argument(
        "--header-timeout", type=float, default=None,
        help="seconds a request's headers may take to arrive, 408 beyond (30)",
    )  # fmt: skip
    p.add_argument(
        "--limit-concurrency", type=_positive_int, default=None,
        help="connections served at once; more are answered 503 (uvicorn's; no limit)",
    )  # fmt: skip
    p.add_argument(
        "--idempotency-stale", type=float, default=60.0,
        help="seconds before a retry may run again a request with an Idempotency-Key that "
        "never answered (its server died); 60",
    )  # fmt: skip
    p.add_argument(
        "--signing-key", default=os.environ.get("SLUICE_SIGNING_KEY_FILE"), metavar="FILE",
        help="the signing key that recovers keys' secrets for the SQS endpoint's Signature "
        "Version 4 (`sluice keys signing-key FILE` makes one; $SLUICE_SIGNING_KEY_FILE; "
        "docs/sqs.md)",
    )  # fmt: skip
    p.add_argument("--moto-tests", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--ssl-keyfile", help="the certificate's private key (PEM)")
