-- API keys of the HTTP server (sluice.server.grants).
-- api_keys: one row per key, found by ``hash``, the SHA-256 of its secret (the secret
-- itself is shown once, when the key is made, and never stored). ``grants``: a JSON
-- array of {"pattern": ..., "actions": [...]}; an ``admin`` key may do everything. A
-- revoked key keeps its row (and its name), so the list shows when it was revoked.
CREATE TABLE api_keys (
    name       TEXT    PRIMARY KEY,
    hash       TEXT    NOT NULL UNIQUE,
    grants     TEXT    NOT NULL,
    admin      INTEGER NOT NULL DEFAULT 0,
    created_at REAL    NOT NULL,
    used_at    REAL,
    revoked_at REAL
);
