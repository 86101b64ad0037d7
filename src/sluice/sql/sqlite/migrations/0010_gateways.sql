-- gateways: the queues that touch the outside world (sluice.gateways, docs/gateways.md).
-- A gateway queue is a queue like any other; this row says which transport serves it
-- (dropbox, http, smtp, forward), whether it brings messages in or sends them out, and
-- the transport's settings as a JSON object. `sluice run` serves every row.
CREATE TABLE gateways (
    queue      TEXT    PRIMARY KEY,
    direction  TEXT    NOT NULL CHECK (direction IN ('in', 'out')),
    transport  TEXT    NOT NULL,
    settings   TEXT    NOT NULL,
    created_at REAL    NOT NULL
);
