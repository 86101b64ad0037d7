"""Run one benchmark on two checkouts of sluice, alternately, and keep every report.

    python -m bench.before_after --before ../base --after . --rounds 3 -- bench --only sluice

Each round runs the benchmark module on the ``--before`` tree, then on ``--after``
(each with its own ``src`` first on the path and its own ``bench`` package), so
the machine's drift falls on both alike. The reports are written one after the
other into ``--out``, labelled by round and tree, for the figures to be read side
by side; the benchmark's own peers (raw SQLite, pgqueuer, ...) run in each report
and give each pair a common yardstick.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.harness import machine_facts


def run(tree: Path, module: str, args: list[str], out: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    command = [sys.executable, "-m", module, *args, "--out", str(out)]
    subprocess.run(command, cwd=tree, env=env, check=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.before_after", description=__doc__)
    parser.add_argument("--before", type=Path, required=True, help="checkout measured first")
    parser.add_argument("--after", type=Path, required=True, help="checkout measured second")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True, help="the combined report")
    parser.add_argument("module", help="the benchmark module, e.g. bench or bench.postgres")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    ns = parser.parse_args(argv)
    trees = {"before": ns.before.resolve(), "after": ns.after.resolve()}
    parts = [f"# {ns.module} {' '.join(ns.args)}: before and after, {ns.rounds} rounds", ""]
    parts += [
        f"- {key}: {value}"
        for key, value in machine_facts(Path(tempfile.gettempdir()), ("sluice",))
    ]
    parts += [f"- {label}: {tree}" for label, tree in trees.items()]
    with tempfile.TemporaryDirectory(prefix="bench-before-after-") as tmp:
        for number in range(1, ns.rounds + 1):
            for label, tree in trees.items():
                report = Path(tmp) / f"{number}-{label}.md"
                run(tree, ns.module, ns.args, report)
                parts += ["", f"## Round {number}, {label}", "", report.read_text("utf-8")]
    ns.out.write_text("\n".join(parts), "utf-8")
    print(f"wrote {ns.out}")


if __name__ == "__main__":
    main()
