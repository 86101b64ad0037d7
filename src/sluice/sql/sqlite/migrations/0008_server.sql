-- The HTTP server's API keys (sluice.server.grants) and idempotency keys.
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

-- idempotency: the answer to each request made with an Idempotency-Key header, per API
-- key (``owner``), so that a retried request gets the same answer instead of doing the
-- work twice. ``fingerprint``: the SHA-256 of the request (method, path, body): the
-- same key with another request is refused. ``status`` is NULL while the first request
-- runs (a retry meanwhile gets 409), then its HTTP status, with its JSON ``answer``.
-- Rows go ``started_at`` plus a day later (sluice.server.idempotency).
CREATE TABLE idempotency (
    owner       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    status      INTEGER,
    answer      TEXT,
    started_at  REAL    NOT NULL,
    PRIMARY KEY (owner, key)
);
CREATE INDEX idempotency_started ON idempotency (started_at);
