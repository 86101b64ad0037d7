"""``python -m bench <benchmark> [options]``: every benchmark by name; ``python -m bench list``
names them. With no name (or only options) it runs the cycle benchmark, as ``make bench`` does
first."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

# Name -> the module whose main(argv) runs it; a family's own benchmark is its __main__.
BENCHMARKS: dict[str, str] = {
    "cycle": "bench.cycle.__main__",
    "concurrent": "bench.cycle.concurrent",
    "schema-cost": "bench.cycle.schema_cost",
    "python-cost": "bench.cycle.python_cost",
    "commit-gap": "bench.cycle.commit_gap",
    "threads": "bench.cycle.threads",
    "outside-sync": "bench.cycle.outside_sync",
    "postgres": "bench.postgres.__main__",
    "wakeup": "bench.postgres.wakeup",
    "backlog": "bench.postgres.backlog",
    "pgbench-cycle": "bench.postgres.pgbench_cycle",
    "content": "bench.content.__main__",
    "isolation": "bench.isolation.__main__",
    "spark": "bench.spark.__main__",
    "topics": "bench.topics.__main__",
    "topics-profile": "bench.topics.profile",
    "rules": "bench.rules.__main__",
    "rules-profile": "bench.rules.profile",
    "rules-spark": "bench.rules.spark",
    "server": "bench.server.__main__",
    "sqs": "bench.sqs.__main__",
    "jobs": "bench.jobs.__main__",
    "jobs-peers": "bench.jobs.peers",
    "celery": "bench.celery.__main__",
    "memory": "bench.memory.__main__",
    "gateways": "bench.gateways.__main__",
    "soak": "bench.soak.__main__",
    "soak-mixed": "bench.soak.mixed",
    "otel": "bench.otel.__main__",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "list":
        print("\n".join(BENCHMARKS))
        return 0
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        print("benchmarks: " + ", ".join(BENCHMARKS))
        print("python -m bench NAME --help: a benchmark's options")
        return 0
    name = "cycle" if not args or args[0].startswith("-") else args.pop(0)
    if name not in BENCHMARKS:
        print(f"no benchmark {name!r}; python -m bench list names them", file=sys.stderr)
        return 2
    run: Callable[[list[str]], Any] = importlib.import_module(BENCHMARKS[name]).main
    status = run(args)
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
