-- The SQS-compatible endpoint; the columns and the table are explained in the SQLite
-- migration of the same name.
ALTER TABLE {schema}.api_keys ADD COLUMN signing text;

CREATE TABLE {schema}.sqs_queues (
    name       text    PRIMARY KEY,
    attributes text    NOT NULL,
    tags       text    NOT NULL,
    created_at double precision NOT NULL,
    changed_at double precision NOT NULL
);
