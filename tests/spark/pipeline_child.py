"""A pipeline driver in its own process, for the crash tests: orders -> Spark SQL -> out.

argv: url checkpoint max_per_batch. Exits 0 when the queue is drained.
"""

from __future__ import annotations

import sys

from sluice.spark.pipeline import run_pipeline, spark_session


def main() -> None:
    url, checkpoint, max_per_batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    spark = spark_session("local[2]", "sluice-pipeline-child")
    run_pipeline(
        spark,
        url,
        source="orders",
        name="crash-test",
        checkpoint=checkpoint,
        body_schema="n BIGINT",
        sql="SELECT named_struct('n', body.n, 'doubled', body.n * 2) AS body, 'out' AS queue "
        "FROM messages",
        max_per_batch=max_per_batch,
    )
    spark.stop()


if __name__ == "__main__":
    main()
