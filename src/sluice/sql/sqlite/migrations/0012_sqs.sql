-- The SQS-compatible endpoint (sluice.server.sqs, docs/sqs.md).
-- api_keys.signing: the key's secret encrypted under the server's signing key
-- (sluice.server.signing), for Signature Version 4, which needs the secret itself; NULL
-- for a key made without a signing key, until its first Bearer request to a server
-- that has one (docs/sqs.md, "keys").
ALTER TABLE api_keys ADD COLUMN signing TEXT;

-- What SQS says of a queue that sluice's catalog does not: its attributes as SQS names
-- them (JSON object of strings) and its tags (JSON object). The queue itself is an
-- ordinary sluice queue of the same name; a queue without a row has SQS's defaults.
CREATE TABLE sqs_queues (
    name       TEXT    PRIMARY KEY,
    attributes TEXT    NOT NULL,
    tags       TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    changed_at REAL    NOT NULL
);
