"""Pipelines from queue to queue on Spark: consume, transform with Spark SQL, enqueue.

One streaming query: the ``sluice`` source reads the input queue as the
stream ``name``, the SQL (over a view called ``messages``) or the function
makes the output rows, and the ``sluice`` sink, also named ``name``, enqueues
them. Exactly once end to end: the sink publishes each micro-batch once (by
batch id), and the source acknowledges the batch's input only after Spark has
committed it, replaying the very same rows after a crash.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from sluice.errors import ConfigurationError
from sluice.spark.options import DEFAULT_MAX_PER_BATCH, absolute_url, connection
from sluice.spark.stopping import await_query

__all__ = ["run_pipeline", "spark_session"]

Transform = Callable[[Any], Any]
"""DataFrame -> DataFrame, or -> {target queue: DataFrame}."""


def spark_session(master: str = "local[*]", app: str = "sluice-pipeline") -> Any:
    """A Spark session for a pipeline run from the command line or a script.

    Its Python workers run this interpreter, which has sluice; the UI is off and
    shuffles are small, as suits queues of messages rather than tables.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no slow host name look-ups
    from pyspark.sql import SparkSession  # noqa: PLC0415  (pyspark is an extra)

    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_pipeline(
    spark: Any,
    url: str,
    *,
    source: str,
    name: str,
    checkpoint: str,
    sql: str | Mapping[str, str] | None = None,
    transform: Transform | None = None,
    where: str | None = None,
    target: str | None = None,
    body_schema: str | None = None,
    max_per_batch: int = DEFAULT_MAX_PER_BATCH,
    once: bool = True,
    interval: float | None = None,
    partitions: int | None = None,
    exclusive: bool = False,
    stop: threading.Event | None = None,
) -> Any:
    """Run ``source`` -> Spark SQL -> target queue(s) as the streaming query ``name``.

    ``sql``: a query over the view ``messages`` (the source's rows; with
    ``body_schema`` its body is a struct), or {target queue: query}. Or
    ``transform``: a function of the DataFrame. The result has a ``body``
    column (a struct or JSON text) and optionally ``queue`` (else ``target``),
    ``priority``, ``properties``, ``type``, ``group``, ``correlation_id``,
    ``reply_to``. ``checkpoint``: the query's checkpoint directory; keep it with
    the name. ``once``: process what is there and return; otherwise the
    running StreamingQuery is returned (``interval``: seconds between batches).
    ``partitions``: tasks per batch (default: Spark's default parallelism).
    ``exclusive``: the pipeline is the source queue's only consumer, so it reads
    the queue by id range and deletes each range when its batch commits (option
    ``exclusive`` of the source) instead of claiming the messages by rounds; a
    queue with isolation refuses it. ``stop``: with ``once``, set (by a signal handler,
    say) to stop the query and return early; the batch it interrupts is replayed by the
    next run, exactly once (the sink publishes a batch once, the source acknowledges
    only committed batches).
    """
    if (sql is None) == (transform is None):
        raise ConfigurationError("a pipeline takes either sql or transform, not both or neither")
    url = absolute_url(url)
    if "://" not in checkpoint:
        # Spark resolves a relative path from where the JVM started, not from here.
        checkpoint = os.path.abspath(checkpoint)
    db = connection(url)
    db.queue(source).spec  # noqa: B018  (QueueNotFound now, not in a Spark task)
    reader = (
        spark.readStream.format("sluice")
        .option("url", url)
        .option("queue", source)
        .option("name", name)
        .option("max_per_batch", str(max_per_batch))
        # Every core reads, transforms and stages a share of each batch.
        .option("partitions", str(partitions or spark.sparkContext.defaultParallelism))
    )
    if where:
        reader = reader.option("where", where)
    if exclusive:
        reader = reader.option("exclusive", "true")
    messages = reader.load()
    if body_schema:
        # Parsed in the JVM (from_json), several times faster than in the source's Python.
        from pyspark.sql import functions as F  # noqa: PLC0415, N812  (Spark's own spelling)

        messages = messages.withColumn("body", F.from_json("body", body_schema))
    if sql is not None:
        messages.createOrReplaceTempView("messages")
        made: Any = (
            spark.sql(sql) if isinstance(sql, str) else {q: spark.sql(s) for q, s in sql.items()}
        )
    else:
        assert transform is not None
        made = transform(messages)
    output = _as_rows(made, target)
    for queue in _literal_targets(made):
        db.queue(queue).spec  # noqa: B018  (a missing target fails before any batch)
    writer = (
        output.writeStream.format("sluice")
        .option("url", url)
        .option("name", name)
        .option("checkpointLocation", checkpoint)
    )
    if target:
        writer = writer.option("queue", target)
    if once:
        return _drain(writer, stop)
    if interval is not None:
        writer = writer.trigger(processingTime=f"{interval} seconds")
    return writer.start()


def _drain(writer: Any, stop: threading.Event | None) -> Any:
    """Start ``writer`` to process what is there; return its query once it ended, or
    stopped because ``stop`` was set."""
    query = writer.trigger(availableNow=True).start()
    if stop is None:
        query.awaitTermination()
    elif not await_query(query, stop):
        query.stop()
    return query


def _as_rows(made: Any, target: str | None) -> Any:
    """The DataFrame(s) a transformation made, as one DataFrame of message fields."""
    from pyspark.sql import functions as F  # noqa: PLC0415, N812  (Spark's own spelling)

    if isinstance(made, Mapping):
        frames = [_body_as_json(df).withColumn("queue", F.lit(q)) for q, df in made.items()]
        if not frames:
            raise ConfigurationError("a pipeline's sql/transform made no target")
        out = frames[0]
        for frame in frames[1:]:
            out = out.unionByName(frame, allowMissingColumns=True)
        return out
    out = _body_as_json(made)
    if "queue" not in out.columns and not target:
        raise ConfigurationError(
            "the pipeline's rows have no queue column: give target=..., select a queue "
            "column, or map target queues to queries"
        )
    return out


def _body_as_json(df: Any) -> Any:
    from pyspark.sql import functions as F  # noqa: PLC0415, N812
    from pyspark.sql.types import StringType  # noqa: PLC0415

    if "body" not in df.columns:
        raise ConfigurationError("a pipeline's rows need a body column (a struct or JSON text)")
    if isinstance(df.schema["body"].dataType, StringType):
        return df
    # Serialised in the JVM: cheaper than turning Spark rows into dicts in Python.
    return df.withColumn("body", F.to_json(F.col("body")))


def _literal_targets(made: Any) -> list[str]:
    return list(made) if isinstance(made, Mapping) else []
