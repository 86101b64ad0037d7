-- Spark streams and sinks (docs/spark.md).
-- streams: a named consumer of a queue that holds what it took until Spark has
-- committed the micro-batch. Its session never expires (pid 0, endless lease), so
-- a stopped query's unacknowledged rounds wait for its restart; c_tx of a held
-- message is the round that took it. round: the last round begun; acked: the last
-- round acknowledged.
-- sinks: per streaming sink, the last micro-batch it published, so a replayed
-- batch publishes nothing twice.
CREATE TABLE streams (
    queue_id   INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    session    INTEGER NOT NULL,
    round      INTEGER NOT NULL DEFAULT 0,
    acked      INTEGER NOT NULL DEFAULT 0,
    created_at REAL    NOT NULL,
    PRIMARY KEY (queue_id, name)
);

CREATE TABLE sinks (
    name       TEXT    PRIMARY KEY,
    batch      INTEGER NOT NULL,
    updated_at REAL    NOT NULL
);
