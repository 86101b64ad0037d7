-- A Spark stream's round on a queue without lanes is moved out of messages into a spool
-- instead of being claimed row by row (postgres_spool.py).
-- stream_spool: a round taken from a queue without lanes, moved out of messages in one
-- piece (postgres_spool.py): n messages, every column, as a compressed Arrow stream.
-- Already compressed: stored out of line as is.
CREATE TABLE {schema}.stream_spool (
    session bigint  NOT NULL,
    round   bigint  NOT NULL,
    chunk   bigint  NOT NULL,  -- the first id of the statement that took it
    n       integer NOT NULL,
    data    bytea   NOT NULL,
    PRIMARY KEY (session, round, chunk)
);
ALTER TABLE {schema}.stream_spool ALTER COLUMN data SET STORAGE EXTERNAL;
