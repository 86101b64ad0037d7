-- Spark streams and sinks (docs/spark.md).
-- streams: a named consumer of a queue that holds what it took until Spark has
-- committed the micro-batch. Its session never expires (pid 0, endless lease), so
-- a stopped query's unacknowledged rounds wait for its restart; c_tx of a held
-- message is the round that took it. round: the last round begun; acked: the last
-- round acknowledged.
-- sinks: per streaming sink, the last micro-batch it published, so a replayed
-- batch publishes nothing twice.
CREATE TABLE {schema}.streams (
    queue_id   integer NOT NULL,
    name       text    NOT NULL,
    session    bigint  NOT NULL,
    round      bigint  NOT NULL DEFAULT 0,
    acked      bigint  NOT NULL DEFAULT 0,
    created_at double precision NOT NULL,
    PRIMARY KEY (queue_id, name)
);

CREATE TABLE {schema}.sinks (
    name       text    PRIMARY KEY,
    batch      bigint  NOT NULL,
    updated_at double precision NOT NULL
);
