-- gateways: the queues that touch the outside world; the table is explained in the
-- SQLite migration of the same name.
CREATE TABLE {schema}.gateways (
    queue      text    PRIMARY KEY,
    direction  text    NOT NULL CHECK (direction IN ('in', 'out')),
    transport  text    NOT NULL,
    settings   text    NOT NULL,
    created_at double precision NOT NULL
);
