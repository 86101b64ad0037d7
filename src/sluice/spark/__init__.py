"""sluice on Apache Spark (``pip install 'sluice-queue[spark]'``): the ``sluice`` data source
and pipelines.

- ``spark.read.format("sluice")``: browse a queue as a DataFrame;
  ``spark.readStream.format("sluice")``: consume it, exactly once with the
  query's checkpoint; ``df.write`` / ``writeStream``: enqueue the rows.
- ``run_pipeline``: queue -> Spark SQL -> queue(s), exactly once end to end.

See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from sluice.extras import require

# Before any of its modules: without the extra, every use of sluice.spark (an import,
# sluice pipeline, sluice run --engine spark) ends here, naming it.
require("spark", "sluice.spark")

from sluice.spark.options import absolute_url, connection  # noqa: E402
from sluice.spark.pipeline import run_pipeline, spark_session  # noqa: E402
from sluice.spark.source import SluiceDataSource  # noqa: E402

__all__ = [
    "SluiceDataSource",
    "absolute_url",
    "drop_stream",
    "forget_sink",
    "register",
    "run_pipeline",
    "spark_session",
]


def register(spark: Any) -> None:
    """Register the data source with ``spark`` explicitly (format("sluice") finds it anyway)."""
    spark.dataSource.register(SluiceDataSource)


def drop_stream(url: str, queue: str, name: str) -> bool:
    """Forget a streaming read's progress; the messages it held become ready again."""
    return connection(url).backend.drop_stream(queue, name)


def forget_sink(url: str, name: str) -> None:
    """Forget the last micro-batch a streaming sink published (its query starts over)."""
    connection(url).backend.forget_sink(name)
