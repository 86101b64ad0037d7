"""Where the rules engine's time goes: cProfile of the routing run on a SQLite file.

Run: ``python -m bench rules-profile`` (``--n``, ``--batch``, ``--top``, ``--sort``). Loads N
orders into a fresh SQLite file with the routing rule applied, then profiles
``db.rules.run_until_idle(batch=B)`` alone and prints the top functions. ``bench.rules``
puts the same table (top 25 by cumulative time) at the end of its report.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.rules.place import fresh
from bench.rules.routing import ROUTING, load_orders

__all__ = ["profile_routing"]

_ROOT = str(Path(__file__).resolve().parents[2]) + "/"


def profile_routing(
    tmp_root: Path, *, n: int = 10_000, batch: int = 256, top: int = 25, sort: str = "cumulative"
) -> str:
    """The pstats table of one engine run over N preloaded orders, paths made short."""
    with fresh("sqlite", "profile", tmp_root) as place:
        place.db.apply(ROUTING)
        load_orders(place.db, n)
        profiler = cProfile.Profile()
        profiler.enable()
        stats = place.db.rules.run_until_idle(batch=batch)
        profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats(sort).print_stats(top)
    head = f"{stats.processed:,} orders, batch {batch}, {stats.batches} transactions\n"
    lines = [line for line in stream.getvalue().splitlines() if line.strip()]
    return head + "\n".join(line.replace(_ROOT, "") for line in lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="orders (default 10,000)")
    parser.add_argument("--batch", type=int, default=256, help="engine batch (default 256)")
    parser.add_argument("--top", type=int, default=25, help="functions shown (default 25)")
    parser.add_argument("--sort", default="cumulative", help="pstats sort key (cumulative)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-rules-profile-") as tmp:
        print(profile_routing(Path(tmp), n=args.n, batch=args.batch, top=args.top,
                              sort=args.sort), end="")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
