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
