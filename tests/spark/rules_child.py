"""A rules engine on Spark in its own process, for the crash tests.

argv: url checkpoint max_per_batch now. Exits 0 when nothing is due any more.
"""

from __future__ import annotations

import sys

from sluice.spark.pipeline import spark_session
from sluice.spark.rules import run_rules


def main() -> None:
    url, checkpoint, per_batch, now = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    spark = spark_session("local[2]", "sluice-rules-child")
    stats = run_rules(spark, url, checkpoint=checkpoint, max_per_batch=per_batch, now=now)
    print(f"processed {stats.processed} in {stats.batches} batches", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
