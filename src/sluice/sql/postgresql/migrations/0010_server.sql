-- API keys of the HTTP server (sluice.server.grants); the table is explained in the
-- SQLite migration of the same name.
CREATE TABLE {schema}.api_keys (
    name       text    PRIMARY KEY,
    hash       text    NOT NULL UNIQUE,
    grants     text    NOT NULL,
    admin      boolean NOT NULL DEFAULT false,
    created_at double precision NOT NULL,
    used_at    double precision,
    revoked_at double precision
);

-- idempotency: the answers of requests made with an Idempotency-Key, per API key; the
-- table is explained in the SQLite migration of the same name.
CREATE TABLE {schema}.idempotency (
    owner       text    NOT NULL,
    key         text    NOT NULL,
    fingerprint text    NOT NULL,
    status      integer,
    answer      text,
    started_at  double precision NOT NULL,
    PRIMARY KEY (owner, key)
);
CREATE INDEX idempotency_started ON {schema}.idempotency (started_at);
