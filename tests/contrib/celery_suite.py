"""Celery's own integration suite (t/integration of its sdist), unchanged, against the
sluice transport: ``python -m tests.contrib.celery_suite sqlite|postgresql [files...]``
(``make celery-suite`` runs both). It takes about 4 minutes a backend, so it is not
part of ``make test``; docs/celery.md lists what did not pass and why.

The broker is a fresh SQLite file, or a fresh schema of the PostgreSQL at
``SLUICE_TEST_POSTGRES_URL`` (default 127.0.0.1:5432, database test); the result
backend is the Redis at 127.0.0.1:6379 (database 7), as Celery's own CI pairs them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import uuid

from tests.conftest import drop_schema
from tests.contrib.peers import source

FILES = ("t/integration/test_tasks.py", "t/integration/test_inspect.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend", choices=["sqlite", "postgresql"])
    parser.add_argument("files", nargs="*", default=list(FILES))
    args = parser.parse_args()
    root = source("celery")
    with tempfile.TemporaryDirectory() as tmp:
        if args.backend == "sqlite":
            broker = f"sluice+sqlite:///{tmp}/broker.db"
        else:
            base = os.environ.get(
                "SLUICE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
            )
            sep = "&" if "?" in base else "?"
            broker = f"sluice+{base}{sep}schema=celery_suite_{uuid.uuid4().hex[:8]}"
        env = {
            **os.environ,
            "TEST_BROKER": broker,
            "TEST_BACKEND": os.environ.get("TEST_BACKEND", "redis://127.0.0.1:6379/7"),
        }
        command = [
            sys.executable, "-m", "pytest", "-p", "sluice.contrib.kombu",
            "-p", "celery.contrib.pytest", "-p", "no:cacheprovider", "-o", "addopts=",
            "--timeout", "120", "-q", "-rfEs", *args.files,
        ]  # fmt: skip
        print(f"Celery's suite on {broker}", flush=True)
        try:
            return subprocess.run(command, cwd=root, env=env, check=False).returncode
        finally:
            if args.backend == "postgresql":
                drop_schema(broker.removeprefix("sluice+"))  # the shared server as it was found


if __name__ == "__main__":
    sys.exit(main())
